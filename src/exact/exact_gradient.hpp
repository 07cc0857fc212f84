#pragma once
// The gradient of a global batch with the same bits at every layout (the
// Trainer's reproducible mode, docs/architecture.md "Reproducible mode"):
// the batch is cut into a fixed number of virtual shards by position, each
// shard's gradient is computed on its own, rounded onto a grid fixed for the
// step (from the largest magnitude over all shards, an exact max) coarse
// enough that every partial sum of rounded values is a double without
// rounding, and summed, within a rank and then across ranks:
// exactly, so in any order and grouping. All of it on the device. In the one
// pass (shard_pass.hpp) a linear layer's products instead go over every
// rank's rows in one order fixed by the shards (defer).

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kdp/core/precision.hpp"
#include "kdp/core/tensor.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::exact {

struct PairRows;  // a linear layer's rows of the one pass from every rank

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
  /// Takes one pass's products for the gradients of parameters `weight` and
  /// `bias` (in the optimizer's order; npos: not wanted): dy [rows, out] and
  /// x [rows, in], whose rows [starts[t], starts[t + 1]) are shard ids[t]'s.
  /// reduce() makes them as products over the whole global batch: every
  /// rank's rows of these parameters gathered, shard after shard in the
  /// order of their ids (the same at every layout), and each element of the
  /// weight's gradient the chain of fused multiply-adds of dy's column times
  /// x's over those rows in that order (row_gemm's; in bf16, row_gemm_bf16's
  /// pairs), the bias's the sum of dy's column in that order; each rank makes
  /// its own part of them. A product over one order of the rows needs no
  /// rounding onto a grid, and the products run at the rate of plain ones.
  void defer(size_t weight, size_t bias, const Tensor& dy, const Tensor& x, Precision precision,
             const std::vector<int64_t>& starts, const std::vector<int>& ids);
  /// Makes reduce() take the deferred products (the one pass) at every step,
  /// on a rank whose batch had no rows too: every rank of the one pass must.
  void use_one_pass() { one_pass_ = true; }
  static constexpr size_t npos = static_cast<size_t>(-1);
  /// Sums every rank's kept shards exactly (every rank together), or makes
  /// the deferred products (where the rank kept no shard: the one pass), and
  /// forgets them. The sums of a step's micro-batches are added in their order (the
  /// same at every layout); after the step's last one (`last`), the
  /// parameters' gradients are set to the total. `shards` bounds the number
  /// of shards of one micro-batch over all ranks.
  void reduce(int shards, bool last = true);

  /// reduce()'s first half: the exact sum of every rank's kept shards into
  /// sum_. (Public: CUDA's device lambdas may not be defined in a private
  /// member function.)
  void sum_shards(int shards);
  /// The rounded sums of this rank's part into `rounded`, after the step's
  /// last micro-batch (else false). (Public for the same reason.)
  bool exact_part(int shards, bool last, const View1& rounded);

 private:
  struct Deferred {
    size_t weight, bias;
    Tensor dy, x;
    Precision precision;
    std::vector<int64_t> starts;
    std::vector<int> ids;
  };
  void grow_to(int shards);
  std::vector<double> grids(int shards);
  std::map<std::pair<size_t, size_t>, PairRows> deferred_rows(
      std::vector<std::vector<char>>& received) const;
  uint32_t weight_part(size_t w, int64_t out, int64_t in, const float* dy, const float* x,
                       int64_t rows, Precision precision, float* grad) const;
  uint32_t bias_part(size_t b, int64_t out, const float* dy, int64_t rows, float* grad) const;
  void make_deferred(float* grad);
  bool one_pass_part(float* grad, bool last);

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
  std::vector<Deferred> deferred_;
  bool one_pass_ = false;
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
