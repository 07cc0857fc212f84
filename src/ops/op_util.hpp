#pragma once
// Checks and helpers shared by the op implementations.

#include <fmt/format.h>

#include "core/check.hpp"
#include "core/parallel_for.hpp"
#include "kdp/autograd/node.hpp"
#include "kdp/core/binding.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/tensor.hpp"

namespace kdp::ops_detail {

inline void check_defined(const char* op, const Tensor& t, const char* arg) {
  KDP_CHECK_FOR(op, t.defined(), StateError, "argument '{}' is undefined", arg);
}

/// Both tensors must be on one device; the message names both.
inline void check_same_device(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                              const char* b_name) {
  KDP_CHECK_FOR(
      op, a.device() == b.device(), DeviceError,
      "tensors on different devices: {} {} is on {}, {} {} is on {} (move one with .to())", a_name,
      a.shape().str(), a.device().str(), b_name, b.shape().str(), b.device().str());
}

/// NumPy broadcasting of two shapes (aligned at the last dimension).
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

/// out[0] = scale * sum of x (accumulated in double).
void sum_all_kernel(const Device& device, View1 out, ConstView1 x, double scale);

/// out[o, i] = scale * sum_d x[o, d, i] for the split [outer, size, inner].
void sum_dim_kernel(const Device& device, View1 out, ConstView1 x, DimSplit s, float scale);

/// Sums `g` over the dimensions that were broadcast to turn `shape` into g's shape.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace kdp::ops_detail
