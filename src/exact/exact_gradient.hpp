#pragma once
// The gradient of a global batch with the same bits at every layout (the
// Trainer's reproducible mode, docs/architecture.md "Reproducible mode"):
// the batch is cut into a fixed number of virtual shards by position, each
// shard's gradient is computed on its own, rounded onto a grid fixed for the
// step (from the largest magnitude over all shards, an exact max, or from a
// bound on it) coarse enough that every partial sum of rounded values is a
// double without rounding, and summed, within a rank and then across ranks:
// exactly, so in any order and grouping. All of it on the device.

#include <cstdint>
#include <string>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::exact {

class ExactGradient {
 public:
  /// Products of the one pass (defer) run on `threads` threads.
  ExactGradient(const optim::NamedParameters& params, dist::Communicator& comm,
                const Device& device, int threads = 1);
  int threads() const { return threads_; }
  /// Keeps the parameters' gradients of one shard (after its backward).
  void keep_shard();
  /// Keeps `grads`, one shard's gradients of the parameters in their order
  /// (undefined: none).
  void keep_shard(const std::vector<Tensor>& grads);
  /// Takes one pass's products of the gradients of parameters `weight` and
  /// `bias` (in the optimizer's order; npos: not wanted), made at the sum:
  /// shard t's (rows [starts[t], starts[t + 1]) of dy [rows, out] and x
  /// [rows, in]) are dy's rows transposed times x's and the sum of dy's rows.
  /// Their grid comes from bounds taken now: the largest |x| times the largest
  /// sum of |dy| over one shard's rows in one column.
  void defer(size_t weight, size_t bias, const Tensor& dy, const Tensor& x,
             const std::vector<int64_t>& starts);
  static constexpr size_t npos = static_cast<size_t>(-1);
  /// Sums every rank's kept shards exactly (every rank together) and forgets
  /// them. The sums of a step's micro-batches are added in their order (the
  /// same at every layout); after the step's last one (`last`), the
  /// parameters' gradients are set to the total. `shards` bounds the number
  /// of shards of one micro-batch over all ranks.
  void reduce(int shards, bool last = true);

  /// reduce()'s first half: the exact sum of every rank's kept shards into
  /// sum_. (Public: CUDA's device lambdas may not be defined in a private
  /// member function.)
  void sum_shards(int shards);

 private:
  struct Deferred {
    size_t weight, bias;
    Tensor dy, x;
    std::vector<int64_t> starts;
    std::vector<float> bias_sums;  // [shard, out]: made with the bounds
  };
  void grow_to(int shards);
  std::vector<double> grids(int shards);
  void make_deferred(const Deferred& d, const std::vector<double>& magic,
                     std::vector<bool>& written);

  const optim::NamedParameters& params_;
  dist::Communicator& comm_;
  Device device_;
  int threads_;
  std::vector<int64_t> offset_;  // of each parameter in a shard's flat row
  int64_t total_ = 0;            // elements in a row
  Kokkos::View<float**, Kokkos::LayoutRight, MemSpace> kept_;  // [shard, element]
  Kokkos::View<double*, MemSpace> sum_;
  Kokkos::View<double*, MemSpace> step_;  // the step's earlier micro-batches
  dist::Part part_;                       // of sum_ and step_ this rank completes
  int micro_ = 0;                         // micro-batches summed into step_
  std::vector<uint32_t> largest_;         // |x|'s bits, per parameter, over the kept shards
  std::vector<uint32_t> input_bound_, output_bound_;  // of the deferred products, as bits
  std::vector<Deferred> deferred_;
  int count_ = 0;
};

/// Rows [first, first + step, ...) of `x` (count of them) as a new tensor on
/// x's device: the rows of one shard in a rank's batch.
Tensor strided_rows(const Tensor& x, int64_t first, int64_t step, int64_t count);

/// Rows of a rank's batch in each of `shards` virtual shards, as the first row
/// and the stride of every shard this rank holds: row l of rank r (of `ranks`,
/// which divide `shards`) is position r + l ranks of the global batch
/// (DistributedSampler's order), in shard (position mod shards), so a shard's
/// rows are l0, l0 + shards / ranks, ...
struct ShardRows {
  int64_t first = 0, step = 1, count = 0;
  int shard = 0;  // its number
};
std::vector<ShardRows> shard_rows(int64_t rows, int rank, int ranks, int shards);

}  // namespace kdp::exact
