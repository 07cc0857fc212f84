#pragma once
/// \file
/// Reproducible mode's whole-batch products (docs/architecture.md
/// "Reproducible mode"). While a ShardProducts is alive on a thread, kdp's
/// fp32 host products on that thread go to row_gemm (a sample's row has the
/// same bits whatever batch it is in), and the backward of a linear layer
/// hands the products that make the gradients of its weight and bias to it
/// instead of summing the batch: each shard's gradient is its sum over its
/// own rows alone, so a rank's shards go forward and back in one pass and
/// still keep one gradient each.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp::detail {

class ShardProducts {
 public:
  /// Shard t holds the batch's rows [starts[t], starts[t + 1]); the products
  /// run on `threads` threads (host_blocks).
  explicit ShardProducts(std::vector<int64_t> starts, int threads = 1);
  virtual ~ShardProducts();
  ShardProducts(const ShardProducts&) = delete;
  ShardProducts& operator=(const ShardProducts&) = delete;

  /// The one alive on this thread (the innermost), or null.
  static ShardProducts* active();

  int64_t total_rows() const { return starts_.back(); }
  const std::vector<int64_t>& starts() const { return starts_; }
  int threads() const { return threads_; }

  /// Takes a linear layer's gradient products, to be made later: shard t's
  /// gradient of the weight is dy's rows of t (dy: [rows, out]) transposed
  /// times x's (x: [rows, in]), of the bias the sum of dy's rows of t.
  /// `weight` or `bias` is null where that gradient is not wanted. False where
  /// neither leaf's gradient is kept here (the layer then sums the batch).
  virtual bool defer(const TensorImpl* weight, const TensorImpl* bias, const Tensor& dy,
                     const Tensor& x) = 0;

 private:
  std::vector<int64_t> starts_;
  int threads_;
  ShardProducts* outer_;
};

/// Whether kdp's host products on this thread must be row_gemm's.
inline bool row_independent_products() {
  return ShardProducts::active() != nullptr;
}

}  // namespace kdp::detail
