#pragma once
/// \file
/// Loss functions (PyTorch's semantics and names). Class targets are tensors of
/// class indices stored as floats (exact up to 2^24 classes).

#include "kdp/core/tensor.hpp"

namespace kdp {

enum class Reduction { None, Mean, Sum };

/// mean((input - target)^2); input and target must have one shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

/// Cross entropy of logits [B, C] against class indices [B]: log-softmax and
/// negative log-likelihood fused, computed without overflow for large logits.
/// An index outside [0, C) is a ValueError naming the position and the value.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::Mean);

/// Negative log-likelihood of log-probabilities [B, C] against class indices [B].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                Reduction reduction = Reduction::Mean);

}  // namespace kdp
