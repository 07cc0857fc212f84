#pragma once
/// \file
/// The one hook through which a mode changes how products are made
/// (docs/architecture.md, "Reproducible mode"). Where the calling thread's
/// ExecutionContext holds a ProductPolicy, every host product goes to row_gemm
/// (fp32) or row_gemm_bf16 (bf16 under autocast), whose rows' bits do not
/// depend on the batch around them, on the policy's threads, and a linear
/// layer's backward offers the policy the products of its weight and bias
/// gradients before it sums the batch. The ops know this interface alone;
/// reproducible mode's wing (src/exact/) implements it.

#include <cstdint>

#include "kdp/core/execution_context.hpp"
#include "kdp/core/precision.hpp"
#include "kdp/core/tensor.hpp"

namespace kdp::detail {

class ProductPolicy {
 public:
  virtual ~ProductPolicy() = default;

  /// The rows of every batch the policy's products see.
  virtual int64_t batch_rows() const = 0;
  /// Threads the products may use (kernels/fork_join.hpp's host_blocks).
  virtual int threads() const = 0;
  /// Offered a linear layer's gradient products: the weight's is dy^T x
  /// (dy: [rows, out], x: [rows, in]) in `precision` (its forward's), the
  /// bias's the column sums of dy; `weight` or `bias` is null where that
  /// gradient is not wanted. True where the policy takes them (the layer then
  /// makes neither), false where the layer sums the batch as usual.
  virtual bool take_linear_gradients(const TensorImpl* weight, const TensorImpl* bias,
                                     const Tensor& dy, const Tensor& x, Precision precision) = 0;
};

/// The policy of the calling thread's execution context, or null.
inline ProductPolicy* product_policy() {
  return ExecutionContext::current().products;
}

}  // namespace kdp::detail
