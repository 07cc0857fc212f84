#pragma once
/// \file
/// Gradient clipping by total norm (torch.nn.utils.clip_grad_norm_) and the
/// gradient checks of a training step. Everything stays on the device: the
/// results are scalar tensors, read by whoever needs the number (as in PyTorch,
/// where clip_grad_norm_ returns a tensor).

#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp::nn {

/// The 2-norm of all gradients together, as a scalar tensor on the device of
/// the first gradient (0 when no parameter has one). Parameters without a
/// gradient are skipped; all gradients must be on one device.
Tensor grad_norm(const std::vector<Tensor>& parameters);

/// Scales every gradient by max_norm / (norm + 1e-6) when that is below 1,
/// computed on the device; returns the norm before clipping (scalar tensor).
Tensor clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm);

/// How many gradient values are NaN or infinite, as a scalar tensor.
Tensor non_finite_grad_count(const std::vector<Tensor>& parameters);

}  // namespace kdp::nn
