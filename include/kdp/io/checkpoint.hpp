#pragma once
/// \file
/// Checkpoints: one HDF5 file with the model's state dict under /model (PyTorch's
/// keys and shapes), every piece of optimizer state under /optimizer, and the
/// training state as attributes of / (see docs/checkpoint-format.md). Files are
/// written under a temporary name, flushed, fsynced and renamed into place, so a
/// crash never leaves a broken checkpoint where a good one was.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kdp/io/run_config.hpp"
#include "kdp/nn/module.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::io {

/// Where training stands, to continue exactly from it.
struct TrainingState {
  int64_t epoch = 0;           // the epoch in progress (or the next one)
  int64_t global_step = 0;     // optimizer steps taken
  int64_t batch_in_epoch = 0;  // batches of `epoch` already consumed
  uint64_t sampler_seed = 0;
  /// Generator (seed, offset) of every device of the rank, in device order.
  std::vector<std::pair<uint64_t, uint64_t>> rng;
  int64_t world_size = 1;
  int64_t devices_per_rank = 1;
  std::string kdp_version;
  /// Identifies the model's parameter names and shapes (model_signature()).
  std::string model_signature;
  /// Further numbers: scheduler state ("scheduler.last_epoch"), metrics
  /// ("val_accuracy"), early-stopping counters.
  std::map<std::string, double> values;
  /// Further lists of numbers, one float64 dataset each in /training (kdp-train:
  /// per-channel normalisation, "data.channel_mean").
  std::map<std::string, std::vector<double>> series;
  /// The configuration of the run that wrote it (/run); empty in checkpoints
  /// written before configurations were recorded.
  RunConfig run_config;
};

/// A checkpoint's model state, optimizer state and training state.
struct Checkpoint {
  nn::StateDict model;
  optim::OptimizerState optimizer;
  TrainingState state;
};

/// A fingerprint of names and shapes: "fnv1a64:<hex>".
std::string model_signature(const nn::StateDict& state);

/// What a checkpoint says about itself, read without its tensors: cheap enough
/// to look at every checkpoint of a directory.
struct CheckpointInfo {
  std::string path;
  TrainingState state;  // rng states and values included
  std::string optimizer_type;
  int64_t model_numel = 0;  // elements of all /model tensors
  /// The configuration that wrote it: /run when recorded, else what the file
  /// shows ("parameters" and "optimizer" only; see recorded_partially).
  RunConfig config;
  bool recorded_partially = false;
};

/// The settings every Trainer adds to a run's configuration: the model's size
/// and signature ("parameters") and the optimizer's type ("optimizer").
RunConfig model_settings(const nn::Module& model, const optim::Optimizer& optimizer);

/// Writes a checkpoint to `path` atomically (temporary file, fsync, rename).
void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const TrainingState& state);

class AtomicFile;

/// A checkpoint of an optimizer sharded over ranks (ZeRO-1) whose state every
/// rank writes itself, its own slice, into the one file: no rank ever holds
/// more of the state than its share. The file is the same as
/// save_checkpoint()'s, and as atomic: rank 0 makes it under a temporary name
/// with room for the state, the ranks write into that room, and only then
/// does rank 0 rename it into place.
///
///   auto layout = optimizer.state_layout();                  // every rank
///   SlicedCheckpoint c(path, model, optimizer, *layout, st);  // rank 0
///   // every rank, with c.plan() from rank 0 (false: it cannot see the file):
///   write_state_slices(plan, optimizer, rank);
///   c.commit();                              // rank 0, once every rank wrote
///
/// Destroyed uncommitted, it removes the temporary file: whatever `path` held
/// is untouched. Every rank must see the directory as one file system.
class SlicedCheckpoint {
 public:
  /// Writes the model, the training state and the optimizer state's layout
  /// (`layout`: Optimizer::state_layout() on rank 0) with unfilled room for
  /// its values, under a temporary name next to `path`.
  SlicedCheckpoint(const std::string& path, const nn::Module& model,
                   const optim::Optimizer& optimizer, const optim::OptimizerState& layout,
                   const TrainingState& state);
  ~SlicedCheckpoint();
  SlicedCheckpoint(SlicedCheckpoint&&) noexcept;
  SlicedCheckpoint& operator=(SlicedCheckpoint&&) noexcept;

  const std::string& path() const { return path_; }
  /// What every rank needs to write its slices (the temporary file, where
  /// each state tensor's values go), as bytes to send.
  const std::string& plan() const { return plan_; }
  /// Syncs the file and renames it over `path`.
  void commit();

 private:
  std::string path_;
  std::unique_ptr<AtomicFile> file_;
  std::string plan_;
};

/// Writes this rank's slice of `optimizer`'s state into the file a
/// SlicedCheckpoint planned (`plan`) and syncs it. Returns false, writing
/// nothing, when this rank cannot open that file (its checkpoint directory is
/// not rank 0's), with the reason in `why`. NumericalError for a value that
/// is not finite, IOError when the file cannot be written or synced; both
/// name the rank (`rank`), the state entry and the checkpoint.
[[nodiscard]] bool write_state_slices(const std::string& plan, const optim::Optimizer& optimizer,
                                      int rank, std::string* why = nullptr);

/// Whether `path` is a checkpoint of some kdp run: an HDF5 file whose format
/// attribute says so. When not, `why` (if given) says what it is instead.
bool is_checkpoint_file(const std::string& path, std::string* why = nullptr);

/// Reads a checkpoint (tensors on the default device).
Checkpoint read_checkpoint(const std::string& path);

/// Reads a checkpoint's attributes, its optimizer type and the shapes of its
/// model tensors, not their values.
CheckpointInfo read_checkpoint_info(const std::string& path);

/// Why `checkpoint` cannot be loaded into `model` and `optimizer`: names,
/// shapes, the model signature, the optimizer type and, when those fit, the
/// optimizer's own checks of its values (Optimizer::state_problems); empty
/// when it fits.
std::vector<std::string> checkpoint_mismatches(const Checkpoint& checkpoint,
                                               const nn::Module& model,
                                               const optim::Optimizer& optimizer);

/// Loads a checkpoint already read into `model` and `optimizer` after the
/// same checks as load_checkpoint(path, ...), which take its tensors' memory;
/// `path` names it in errors.
TrainingState load_checkpoint(Checkpoint checkpoint, const std::string& path, nn::Module& model,
                              optim::Optimizer& optimizer);

/// Reads `path` and loads it into `model` and `optimizer`: names, shapes, the
/// model signature and the optimizer state's shapes are checked from the
/// file's metadata first (every mismatch in one error naming the file), then
/// every dataset is read into fresh tensors, and only then do the parameters
/// and the optimizer state take those tensors' memory. Returns the training
/// state.
TrainingState load_checkpoint(const std::string& path, nn::Module& model,
                              optim::Optimizer& optimizer);

}  // namespace kdp::io
