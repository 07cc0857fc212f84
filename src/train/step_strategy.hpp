#pragma once
// How a training step's micro-batches go forward and backward: one strategy,
// chosen once when the run's epoch is agreed (make_step_strategy), which
// FitRun drives batch after batch.
//
//   default      the batch through the model as the caller wrapped it (DDP
//                reduces the gradients; a rank without a share runs a
//                stand-in batch at weight 0)
//   reproducible mode (src/exact/): the global batch cut into virtual shards,
//                each shard's gradient its own, summed exactly over every rank
//     one pass   a per-sample model's shards in one forward and backward, each
//                linear layer summing a shard's rows apart
//     together   with SyncBatchNorm: the shards forward together through
//                copies of the model, back in one backward
//     one by one every other model: each shard forward and backward on its own

#include <cstdint>
#include <memory>
#include <string>

#include "kdp/core/precision.hpp"
#include "kdp/core/tensor.hpp"
#include "kdp/data/data_loader.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/nn/gradient_exchange.hpp"
#include "kdp/nn/loss.hpp"
#include "kdp/nn/module.hpp"
#include "kdp/optim/lr_scheduler.hpp"
#include "kdp/optim/optimizer.hpp"
#include "kdp/train/trainer.hpp"
#include "test_seam.hpp"

namespace kdp::train::detail {

/// What one call of Trainer::fit works with.
struct FitInputs {
  nn::Module& model;
  const nn::LossFunction& loss;
  optim::Optimizer& optimizer;
  data::DataLoader& train_loader;
  data::DataLoader* val_loader;
  optim::LRScheduler* scheduler;
};

/// Loss and correct predictions summed over an epoch, on the device; in
/// reproducible mode also per virtual shard (each shard's terms in step
/// order, the same bits on whichever rank the layout puts it).
struct EpochSums {
  Tensor loss_sum, correct;
  Tensor shard_loss, shard_correct;  // [shards], with `shards` > 0
  explicit EpochSums(const Device& device, int shards = 0);
  /// loss: the batch's mean loss over n samples; out: logits when the labels
  /// are classes (undefined otherwise); `shard`: the virtual shard they are
  /// (-1: none).
  void add(const Tensor& loss, float n, const Tensor& out, const Tensor& labels, int shard = -1);
};

/// What every strategy works with, fixed for the run.
struct StepEnv {
  const FitInputs& in;
  nn::Module& bare;  // the model inside its wrappers
  const TrainerOptions& options;
  dist::Communicator& comm;
  nn::GradientExchange* exchange;  // the model's (DDP's), or null
  Precision precision;             // agreed by every rank
  bool classes;                    // the labels are classes
  const TestSeam& test;
};

/// The epoch as every rank agreed on it.
struct EpochLayout {
  int64_t global_batch = 0;  // samples per batch over all ranks
  int64_t samples = 0;       // per epoch over all ranks
};

/// One micro-batch handed to a strategy.
struct MicroBatch {
  const data::Batch* batch = nullptr;  // this rank's share (null: it has none)
  /// What a rank without a share runs at weight 0, when the strategy wants
  /// one (runs_stand_in()).
  const data::Batch* stand_in = nullptr;
  bool last_of_step = true;      // the optimizer step's last micro-batch
  bool last_of_epoch = false;    // the epoch's last batch
  int64_t step = 0;              // the optimizer steps before this one
  int64_t epoch = 0, index = 0;  // 0-based, for messages
};

class StepStrategy {
 public:
  virtual ~StepStrategy() = default;
  /// Its name, as the list above gives it.
  virtual std::string name() const = 0;
  /// The virtual shards the epoch's sums keep apart (0: none).
  virtual int shards() const { return 0; }
  /// Whether a rank without a share of a micro-batch runs a stand-in batch.
  virtual bool runs_stand_in() const { return false; }
  /// Forward and backward of one micro-batch, its loss and correct count
  /// added to `sums`. Returns its loss as the anomaly check weighs it
  /// (undefined when the options check none).
  virtual Tensor micro_batch(const MicroBatch& m, EpochSums& sums) = 0;
};

/// The strategy for `env`'s options and model over `layout`; refuses, with a
/// ValueError that says why, a reproducible run it cannot give the same bits
/// at every layout.
std::unique_ptr<StepStrategy> make_step_strategy(const StepEnv& env, const EpochLayout& layout);

/// The default strategy, and reproducible mode's (the one that fits the model).
std::unique_ptr<StepStrategy> make_default_step(const StepEnv& env);
std::unique_ptr<StepStrategy> make_shard_step(const StepEnv& env, const EpochLayout& layout);

}  // namespace kdp::train::detail
