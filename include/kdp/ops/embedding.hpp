#pragma once
/// \file
/// Embedding lookup, as torch.nn.functional.embedding. kdp's tensors hold
/// floats: token ids are whole numbers in a float tensor (exact up to 2^24,
/// far beyond any vocabulary kdp trains), checked before the lookup.

#include <cstdint>
#include <optional>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// Rows of `weight` [num_embeddings, dim] picked by `ids` (any shape):
/// out[..., :] = weight[ids[...], :], of shape ids.shape + [dim]. An id that
/// is not a whole number in [0, num_embeddings) is a ValueError naming its
/// position and value. The weight's gradient adds the rows of the output's
/// gradient into the rows their ids picked, repeated ids in the order of
/// ids (the same bits at every thread count); the row of `padding_idx`
/// (negative: counted from the end, as PyTorch) gets none. The ids get no
/// gradient.
Tensor embedding(const Tensor& ids, const Tensor& weight,
                 std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace kdp
