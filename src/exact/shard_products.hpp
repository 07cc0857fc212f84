#pragma once
/// \file
/// Reproducible mode's product policy for a whole batch of shards
/// (docs/architecture.md "Reproducible mode"). While a ShardProducts lives,
/// it is the calling thread's ProductPolicy: kdp's host products go to
/// row_gemm, or row_gemm_bf16 under bf16 autocast (a sample's row has the same
/// bits whatever batch it is in), and
/// the backward of a linear layer hands the products that make the gradients
/// of its weight and bias to it instead of summing the batch: each shard's
/// gradient is its sum over its own rows alone, so a rank's shards go forward
/// and back in one pass and still keep one gradient each.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kernels/product_policy.hpp"

namespace kdp::exact {

class ShardProducts : public detail::ProductPolicy {
 public:
  /// Shard t holds the batch's rows [starts[t], starts[t + 1]); the products
  /// run on `threads` threads. Installs itself in the calling thread's
  /// execution context until it is destroyed.
  explicit ShardProducts(std::vector<int64_t> starts, int threads = 1);
  ~ShardProducts() override;
  ShardProducts(const ShardProducts&) = delete;
  ShardProducts& operator=(const ShardProducts&) = delete;

  int64_t batch_rows() const override { return starts_.back(); }
  int threads() const override { return threads_; }
  const std::vector<int64_t>& starts() const { return starts_; }

 private:
  std::vector<int64_t> starts_;
  int threads_;
  detail::ProductPolicy* outer_;
};

}  // namespace kdp::exact
