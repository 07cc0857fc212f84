#pragma once
// The gradient of a global batch with the same bits at every layout (the
// Trainer's reproducible mode, docs/architecture.md "Reproducible mode"):
// the batch is cut into a fixed number of virtual shards by position, each
// shard's gradient is computed on its own, rounded onto an integer grid
// fixed for the step (from the largest magnitude over all shards, an exact
// max), and the integers are summed, within a rank and then across ranks, in
// int64: exactly, so in any order and grouping.

#include <cstdint>
#include <string>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::train::detail {

class ExactGradient {
 public:
  ExactGradient(const optim::NamedParameters& params, dist::Communicator& comm)
      : params_(params), comm_(comm) {}
  /// Keeps the parameters' gradients of one shard (after its backward).
  void keep_shard();
  /// Sums every rank's kept shards exactly and sets the parameters' gradients
  /// to the result (every rank together); forgets the shards.
  void reduce(int shards);

 private:
  const optim::NamedParameters& params_;
  dist::Communicator& comm_;
  std::vector<std::vector<std::vector<float>>> kept_;  // shard, parameter, values
};

/// Rows of a rank's batch that belong to each of `shards` virtual shards:
/// row l of rank r (of `ranks`) is position r + l ranks of the global batch
/// (DistributedSampler's order), in shard (position mod shards).
std::vector<std::vector<int64_t>> shard_rows(int64_t rows, int rank, int ranks, int shards);

}  // namespace kdp::train::detail
