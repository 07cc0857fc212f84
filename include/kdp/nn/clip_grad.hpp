#pragma once
/// \file
/// Gradient clipping by total norm (torch.nn.utils.clip_grad_norm_).

#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp::nn {

/// The 2-norm of all gradients together; when above max_norm every gradient is
/// scaled by max_norm / (norm + 1e-6). Parameters without gradient are skipped.
/// Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm);

/// The 2-norm of all gradients together.
double grad_norm(const std::vector<Tensor>& parameters);

}  // namespace kdp::nn
