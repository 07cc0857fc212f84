#pragma once
// Reproducible mode's shards going forward together: a rank's shards of a
// micro-batch, each through a copy of the model whose parameters are leaves
// of their own that view the model's memory (so that each copy's gradients
// are its shard's alone, and nothing is copied), as the replicas of
// one forward over the rank's devices (shards that share a device take turns
// on it). The model's synchronised layers (SyncBatchNorm) meet across the
// shards and ranks and sum their statistics exactly (dist/algorithms/exact_sum.hpp): the
// whole global batch's statistics, and their gradients, are the same bits at
// every layout.

#include <cstdint>
#include <memory>
#include <vector>

#include "kdp/nn/batch_norm.hpp"
#include "kdp/nn/module.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::exact {

class ShardReplicas {
 public:
  /// For the model's parameters `params` (the optimizer's, each one of the
  /// model's); its synchronised layers sum exactly over `shards` parts from
  /// now until this is destroyed.
  ShardReplicas(nn::Module& model, const optim::NamedParameters& params, int shards);
  ~ShardReplicas();
  ShardReplicas(const ShardReplicas&) = delete;
  ShardReplicas& operator=(const ShardReplicas&) = delete;

  /// The outputs of the shards `xs`, shard i on devices[i] through a copy of
  /// the model there (with the model's current parameters and buffers, and
  /// no gradients), whose dropout draws from `seed` and the shard's `keys`
  /// (one per row). Shard i goes to the same device at every call.
  std::vector<Tensor> forward(const std::vector<Tensor>& xs,
                              const std::vector<std::vector<uint64_t>>& keys, uint64_t seed,
                              const std::vector<Device>& devices);
  /// Shard i's gradients after the backward, in the order of `params`
  /// (undefined where its copy got none).
  std::vector<Tensor> gradients(size_t shard) const;
  /// The model's buffers from the first copy's: with synchronised layers,
  /// every copy's are the same, from the whole batch's statistics.
  void keep_buffers();

 private:
  nn::Module& model_;
  std::vector<size_t> places_;  // of each of params in model_.named_parameters()
  std::vector<nn::BatchNormSynchronizer*> synchronizers_;  // summing exactly
  std::vector<std::shared_ptr<nn::Module>> copies_;        // made once each, reused
  size_t used_ = 0;                                        // by the last forward

  nn::Module& copy_on(size_t i, const Device& device);
};

}  // namespace kdp::exact
