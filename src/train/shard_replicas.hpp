#pragma once
// Reproducible mode with SyncBatchNorm: a rank's shards of a micro-batch go
// forward together, each through a copy of the model with parameters of its
// own (so that each copy's gradients are its shard's alone), as the replicas
// of one forward on the rank's first device, taking turns on it. The
// synchronised layers meet across the shards and ranks and sum their
// statistics exactly (dist/exact_sum.hpp): the whole global batch's
// statistics, and their gradients, are the same bits at every layout.

#include <cstdint>
#include <memory>
#include <vector>

#include "kdp/nn/module.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::train::detail {

class ShardReplicas {
 public:
  /// For the model's parameters `params` (the optimizer's, each one of the
  /// model's); its synchronised layers sum exactly over `shards` parts from
  /// now until this is destroyed.
  ShardReplicas(nn::Module& model, const optim::NamedParameters& params, int shards);
  ~ShardReplicas();
  ShardReplicas(const ShardReplicas&) = delete;
  ShardReplicas& operator=(const ShardReplicas&) = delete;

  /// Whether `model` has synchronised layers, which need this.
  static bool needed(const nn::Module& model);

  /// The outputs of the shards `xs` on `device`, each through a fresh copy of
  /// the model whose dropout draws from `seed` and the shard's `keys` (one
  /// per row).
  std::vector<Tensor> forward(const std::vector<Tensor>& xs,
                              const std::vector<std::vector<uint64_t>>& keys, uint64_t seed,
                              const Device& device);
  /// Shard i's gradients after the backward, in the order of `params`
  /// (undefined where its copy got none).
  std::vector<Tensor> gradients(size_t shard) const;
  /// The model's buffers (running statistics) from the first copy's: every
  /// copy's are the same, from the whole batch's statistics.
  void keep_buffers();

 private:
  nn::Module& model_;
  std::vector<size_t> places_;  // of each of params in model_.named_parameters()
  std::vector<std::shared_ptr<nn::Module>> copies_;
};

}  // namespace kdp::train::detail
