#pragma once
/// \file
/// Batch normalisation, as torch.nn.functional.batch_norm, over dimension 1 of
/// [N, C], [N, C, L] or [N, C, H, W]; layer normalisation, as
/// torch.nn.functional.layer_norm, over the last dimensions.

#include <cstdint>
#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// y = (x - mean) / sqrt(var + eps) * weight + bias per channel. With
/// `training` the mean and the biased variance are the batch's, and running
/// statistics that are given are updated in place: running = (1 - momentum)
/// running + momentum stat, with the unbiased variance (as PyTorch). Without
/// it, the running statistics normalise. weight and bias may be undefined
/// (1 and 0). A training batch of one value per channel is a ValueError, as in
/// PyTorch: its variance says nothing.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  bool training = false, double momentum = 0.1, double eps = 1e-5);

/// relu(batch_norm(...)) in one pass forward and one backward: the ReLU's
/// mask is applied where the normalisation's gradient sums are taken.
/// nn::Sequential runs a BatchNorm followed by a ReLU this way.
Tensor batch_norm_relu(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                       bool training = false, double momentum = 0.1, double eps = 1e-5);

/// y = (x - mean) / sqrt(var + eps) * weight + bias over the last
/// normalized_shape.size() dimensions of x, which must be normalized_shape;
/// mean and the biased variance per row of those elements, accumulated in
/// double. weight and bias are normalized_shape or undefined (1 and 0). One
/// fused pass forward; backward one pass per row for the input and one per
/// column for weight and bias, each in a fixed order (the same bits at
/// every thread count).
Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

}  // namespace kdp
