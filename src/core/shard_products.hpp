#pragma once
/// \file
/// Reproducible mode's whole-batch products (docs/architecture.md
/// "Reproducible mode"). While a ShardProducts is alive on a thread, kdp's
/// fp32 host products on that thread go to row_gemm (a sample's row has the
/// same bits whatever batch it is in), and the backward of a linear layer
/// hands the gradients of its weight and bias to it shard by shard, each
/// shard's sum over its own rows alone, instead of summing the batch: a
/// rank's shards go forward and back in one pass and still keep one gradient
/// each.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kdp {
struct TensorImpl;
}

namespace kdp::detail {

class ShardProducts {
 public:
  /// Shard t holds the batch's rows [starts[t], starts[t + 1]).
  explicit ShardProducts(std::vector<int64_t> starts);
  virtual ~ShardProducts();
  ShardProducts(const ShardProducts&) = delete;
  ShardProducts& operator=(const ShardProducts&) = delete;

  /// The one alive on this thread (the innermost), or null.
  static ShardProducts* active();

  int shards() const { return static_cast<int>(starts_.size()) - 1; }
  int64_t first_row(int shard) const { return starts_[static_cast<size_t>(shard)]; }
  int64_t rows(int shard) const {
    return starts_[static_cast<size_t>(shard) + 1] - starts_[static_cast<size_t>(shard)];
  }
  int64_t total_rows() const { return starts_.back(); }

  /// Where shard `shard`'s gradient of the leaf goes (its numel floats, in
  /// its order), or null when the leaf's gradient is not kept here.
  virtual float* slot(const TensorImpl* leaf, int shard) = 0;
  /// Called when shard `shard`'s gradient of the leaf is in its slot (while
  /// it is still in the caches).
  virtual void written(const TensorImpl* leaf, int shard) = 0;

 private:
  std::vector<int64_t> starts_;
  ShardProducts* outer_;
};

/// Whether kdp's host products on this thread must be row_gemm's.
inline bool row_independent_products() {
  return ShardProducts::active() != nullptr;
}

}  // namespace kdp::detail
