#pragma once
// Reproducible mode's BatchNorm: every virtual shard normalises with its own
// batch statistics (as DDP with one shard per rank would), and the running
// statistics advance as if the shards had run one after another in their
// order, whoever ran them: after shards 0..S-1 of a micro-batch,
//
//   r = (1 - m)^S r0 + sum over s of (1 - m)^(S-1-s) m stat_s,
//
// each term computed where its shard ran (from r0, the same everywhere) and
// the sum made exactly across ranks, as the gradients' (exact_gradient.hpp).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kdp/dist/communicator.hpp"
#include "kdp/nn/batch_norm.hpp"

namespace kdp::exact {

class ShardBatchNorm {
 public:
  /// The model's BatchNorm layers that keep running statistics.
  ShardBatchNorm(nn::Module& model, dist::Communicator& comm);
  bool empty() const { return layers_.empty(); }
  /// Before a micro-batch's shards: their common starting statistics.
  void begin();
  /// Before each shard's forward: the running statistics back to the start.
  void before_shard();
  /// After shard `shard` (of `shards` with samples, over every rank) went
  /// forward: its term of the sum.
  void after_shard(int shard, int shards);
  /// After every rank's shards (every rank together): the running statistics
  /// and counts of the micro-batch.
  void finish(int shards);

 private:
  struct Layer {
    nn::BatchNorm* layer;
    double momentum;
    std::vector<float> mean0, var0;  // at begin()
    float count0 = 0.0f;
    std::vector<double> terms;  // this rank's shards' terms: [shard][mean, var]
  };
  std::vector<Layer> layers_;
  dist::Communicator& comm_;
};

/// The model's BatchNorm layers (SyncBatchNorm among them) with their dotted
/// names, depth first.
std::vector<std::pair<std::string, nn::BatchNorm*>> batch_norms(nn::Module& model);

/// Why reproducible mode cannot keep `model`'s BatchNorm layers bit for bit
/// (a synchronised layer, a cumulative average), or "" when it can.
std::string batch_norm_refusal(nn::Module& model);

}  // namespace kdp::exact
