#pragma once
/// \file
/// gather: concatenates per-device outputs on one device (torch.nn.parallel.gather).

#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// Concatenates `tensors` along `dim` on `output_device`. Scalars (rank 0) are
/// gathered into a vector, as PyTorch does. Differentiable: the backward sends
/// each device its slice of the gradient.
Tensor gather(const std::vector<Tensor>& tensors, const Device& output_device, int dim = 0);

}  // namespace kdp
