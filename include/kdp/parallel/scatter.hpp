#pragma once
/// \file
/// scatter: splits a batch into chunks, one per device (torch.nn.parallel.scatter).

#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// Splits `input` along `dim` with torch.chunk's rule (ceil(B / n) per chunk, the
/// last smaller, fewer chunks than devices when B is small: B = 5 on 4 devices
/// gives 2, 2, 1) and moves chunk i to devices[i]: a zero-copy view where the
/// memory is shared and the chunk is contiguous, a copy on the target instance
/// otherwise. Differentiable: the backward gathers the chunks' gradients.
std::vector<Tensor> scatter(const Tensor& input, const std::vector<Device>& devices, int dim = 0);

}  // namespace kdp
