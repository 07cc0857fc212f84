#pragma once
/// \file
/// Trainer: the training loop users would otherwise write themselves, with what
/// a long job on a cluster needs (Lightning's Trainer, in kdp).
///
/// fit() runs epochs (or max_steps) of the train loader: forward, loss, backward
/// (with gradient accumulation over micro-batches, skipping DDP's communication
/// for all but the last), gradient clipping by norm, the optimizer and scheduler
/// steps; evaluates each epoch with exact distributed metrics (every sample
/// counted once); writes checkpoints every N steps and/or every epoch (rank 0,
/// atomically; keep the last K and the best by a monitored metric); resumes
/// exactly where a checkpoint left off; stops early on the monitored metric.
///
/// A run never destroys another run's work: rank 0 locks checkpoint_dir and
/// the metrics file for the whole run, checks them before anything is written,
/// and every rank throws the same io::RunDirectoryError when another run holds
/// them, when the directory belongs to another configuration, when a fresh
/// start would overwrite checkpoints or metrics rows, when none of the
/// existing checkpoints can be resumed from, or when resuming would fork the
/// run. A metrics file that cannot be written stops the run like a checkpoint
/// that cannot be: every rank throws IOError, after a checkpoint if one can be
/// written.
///
/// SIGTERM, SIGINT or SIGUSR1 at any rank stop every rank after the same step:
/// a checkpoint is written and fit() returns with stopped_by_signal, after which
/// a driver exits with kExitRequeue so that a batch script can requeue the job.
/// A NaN or Inf in the loss or the gradients stops training with a
/// NumericalError naming the step and the parameter, before the optimizer step,
/// so no poisoned checkpoint is written.

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kdp/core/precision.hpp"
#include "kdp/data/data_loader.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/exact/one_pass.hpp"
#include "kdp/io/run_config.hpp"
#include "kdp/nn/loss.hpp"
#include "kdp/nn/module.hpp"
#include "kdp/optim/lr_scheduler.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::train {

/// The exit status of a driver stopped by a signal after writing a checkpoint
/// (EX_TEMPFAIL: "try again"); batch scripts requeue on it.
inline constexpr int kExitRequeue = 75;

/// TrainerOptions' groups, one per concern: a Trainer's options are the
/// members of all five (`options.epochs`, `options.checkpoint_dir`), and code
/// that needs one concern takes its group (`const CheckpointOptions&`).

/// The rank's devices and the order of its samples.
struct DataOptions {
  /// The rank's devices (their generators are saved in checkpoints).
  std::vector<Device> devices;
  /// The sampler seed, recorded in checkpoints.
  uint64_t sampler_seed = 0;
};

/// How long training runs, how each optimizer step is made, and when
/// training stops early.
struct OptimisationOptions {
  int64_t epochs = 1;
  /// Stop after this many optimizer steps (-1: no limit).
  int64_t max_steps = -1;
  /// Micro-batches per optimizer step.
  int64_t accumulate_grad_batches = 1;
  /// Clip the gradients' total norm to this (0: off).
  double gradient_clip_norm = 0.0;
  /// Step the scheduler after every optimizer step instead of every epoch.
  bool step_scheduler_per_batch = false;

  /// The metric for best checkpoints and early stopping: val_loss, val_accuracy,
  /// loss, accuracy, or for regressions val_mse, val_mae, val_r2 (losses and
  /// errors are minimised, accuracies and R² maximised).
  std::string monitor = "val_loss";
  /// Stop after this many epochs without improvement of `monitor` (0: never).
  int64_t early_stopping_patience = 0;
  double early_stopping_min_delta = 0.0;
  /// Stop after the epoch whose `monitor` reaches this value (at least it for
  /// accuracies, at most it for losses; NaN: never), as Lightning's
  /// EarlyStopping(stopping_threshold).
  double stopping_threshold = std::numeric_limits<double>::quiet_NaN();
};

/// How the steps compute and what they guarantee: the precision, reproducible
/// mode, the anomaly check.
struct ModeOptions {
  /// Reproducible mode: the weights and optimizer state after N steps are the
  /// same bits at any number of ranks that divides `shards` (with the same
  /// seed, global batch and data, and DistributedSampler's exact order). Each
  /// global batch is cut into `shards` virtual shards by position; each
  /// shard's gradient is its own (a per-sample model's shards go in one pass,
  /// each linear layer summing a shard's rows apart) and the shards are summed
  /// exactly (integers on a grid fixed per step), so neither who computed a
  /// shard nor the order of the sums shows. The model goes to fit() bare (the
  /// Trainer reduces the gradients itself, not DistributedDataParallel); a
  /// rank computes on its first device (with SyncBatchNorm, on all of them).
  /// Dropout draws each sample's mask from its index and the step; BatchNorm
  /// normalises each shard on its own, SyncBatchNorm the whole global batch
  /// (its sums exact too); gradient
  /// accumulation adds the micro-batches' exact sums in their order.
  /// docs/architecture.md, "Reproducible mode", has the design, its limits and
  /// its cost. Off unless set here (fit() takes the model as the caller
  /// wrapped it); kdp-train sets it with --reproducible (train::decide_modes).
  bool reproducible = false;
  int shards = 12;
  /// The precision of the products and convolutions of forward and loss, in
  /// training and evaluation (kdp::autocast around them): fp32, bf16, or Auto
  /// (bf16 where every rank's first device has bf16 matrix units). Master
  /// weights, optimizer state and checkpoints stay fp32 in every precision,
  /// so a run may resume in another one.
  Precision precision = Precision::fp32;
  /// Check the loss and the gradients for NaN and Inf every step.
  bool detect_anomaly = true;
};

/// Where checkpoints go and what they record, and how a run starts beside the
/// files of an earlier one (fresh, resumed, overwriting).
struct CheckpointOptions {
  /// Where checkpoints go (empty: none).
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 0;  // 0: not by steps
  bool checkpoint_every_epoch = true;
  int keep_last = 3;
  bool keep_best = true;
  /// A sharded optimizer's checkpoints (dist::ZeroRedundancyOptimizer): every
  /// rank writes its own slice of the state into the file (io::SlicedCheckpoint;
  /// every rank must then see checkpoint_dir as one file system, or the run
  /// falls back to gathering, saying so), or with false rank 0 gathers the
  /// whole state and writes it. The files are the same.
  bool checkpoint_slices = true;
  /// "" or "never" (start fresh), "auto" (the newest checkpoint in
  /// checkpoint_dir that reads, fits and was written by this configuration; the
  /// newer ones that do not are moved to its rejected/) or a checkpoint's path.
  std::string resume;
  /// The settings that identify this run (model, optimizer hyperparameters,
  /// data and its normalisation, global batch, seed), recorded in
  /// checkpoint_dir and in every checkpoint. The Trainer adds the model's size
  /// and signature and the optimizer's type. A directory or checkpoint recorded
  /// with other values is refused before anything is written.
  io::RunConfig run_config;
  /// With a fresh start: discard the checkpoints already in checkpoint_dir
  /// and replace an existing metrics file, instead of refusing to start.
  /// Only kdp's files are removed or replaced; others are left and named.
  bool overwrite = false;
  /// Rank 0 holds advisory locks on checkpoint_dir and the metrics file for
  /// the whole run, and a run whose files another run holds is refused. With
  /// false, a file system without working locks is accepted (the user makes
  /// sure that one run at a time uses them); a lock held elsewhere still
  /// refuses the run.
  bool require_locks = true;
  /// Further numbers recorded in every checkpoint's /training attributes (the
  /// data's normalisation, say), for whoever reads it later.
  std::map<std::string, double> record;
  /// Further lists of numbers recorded in every checkpoint, one float64
  /// dataset each in /training (kdp-train: per-channel normalisation).
  std::map<std::string, std::vector<double>> record_series;
};

/// What a run shows and writes as it goes: progress, metrics, trace.
struct LoggingOptions {
  /// Metrics per logged step and per epoch (.csv, else JSON lines; empty: none).
  std::string metrics_path;
  int64_t log_every_steps = 50;
  /// 1: progress bar, 0: log lines, -1: a bar when stdout is a terminal.
  int progress = -1;
  /// Chrome-trace JSON of every rank's step phases (data wait, forward,
  /// backward, buckets and their reductions, optimizer), merged by rank 0 at
  /// the end of fit(), which names the slowest rank (empty: none). An existing
  /// file is replaced only with `overwrite`; a resumed run writes its part
  /// beside it (run.json -> run.step1200.json, the step it resumed at).
  std::string trace_path;
  /// Next-token prediction on text: the bytes of text one target token
  /// stands for (data::TokenDataset::bytes_per_token(), of the validation
  /// text; 1 for byte tokens, for which both losses convert exactly). When above 0, the
  /// progress line, the history and the metrics file also give the losses
  /// (nats per token) in bits per byte: loss / ln 2 / bytes_per_token.
  double bytes_per_token = 0.0;
};

/// Everything a Trainer can be told: the five groups above.
struct TrainerOptions : DataOptions,
                        OptimisationOptions,
                        ModeOptions,
                        CheckpointOptions,
                        LoggingOptions {
  /// Chained setters, one per option, to name each where it is set:
  /// TrainerOptions{}.with_epochs(...).with_record(...).
  TrainerOptions& with_epochs(int64_t value) {
    epochs = value;
    return *this;
  }
  TrainerOptions& with_max_steps(int64_t value) {
    max_steps = value;
    return *this;
  }
  TrainerOptions& with_accumulate_grad_batches(int64_t value) {
    accumulate_grad_batches = value;
    return *this;
  }
  TrainerOptions& with_gradient_clip_norm(double value) {
    gradient_clip_norm = value;
    return *this;
  }
  TrainerOptions& with_step_scheduler_per_batch(bool value) {
    step_scheduler_per_batch = value;
    return *this;
  }
  TrainerOptions& with_checkpoint_dir(std::string value) {
    checkpoint_dir = std::move(value);
    return *this;
  }
  TrainerOptions& with_checkpoint_every_steps(int64_t value) {
    checkpoint_every_steps = value;
    return *this;
  }
  TrainerOptions& with_checkpoint_every_epoch(bool value) {
    checkpoint_every_epoch = value;
    return *this;
  }
  TrainerOptions& with_keep_last(int value) {
    keep_last = value;
    return *this;
  }
  TrainerOptions& with_keep_best(bool value) {
    keep_best = value;
    return *this;
  }
  TrainerOptions& with_checkpoint_slices(bool value) {
    checkpoint_slices = value;
    return *this;
  }
  TrainerOptions& with_monitor(std::string value) {
    monitor = std::move(value);
    return *this;
  }
  TrainerOptions& with_resume(std::string value) {
    resume = std::move(value);
    return *this;
  }
  TrainerOptions& with_run_config(io::RunConfig value) {
    run_config = std::move(value);
    return *this;
  }
  TrainerOptions& with_overwrite(bool value) {
    overwrite = value;
    return *this;
  }
  TrainerOptions& with_require_locks(bool value) {
    require_locks = value;
    return *this;
  }
  TrainerOptions& with_early_stopping_patience(int64_t value) {
    early_stopping_patience = value;
    return *this;
  }
  TrainerOptions& with_early_stopping_min_delta(double value) {
    early_stopping_min_delta = value;
    return *this;
  }
  TrainerOptions& with_stopping_threshold(double value) {
    stopping_threshold = value;
    return *this;
  }
  TrainerOptions& with_metrics_path(std::string value) {
    metrics_path = std::move(value);
    return *this;
  }
  TrainerOptions& with_trace_path(std::string value) {
    trace_path = std::move(value);
    return *this;
  }
  TrainerOptions& with_log_every_steps(int64_t value) {
    log_every_steps = value;
    return *this;
  }
  TrainerOptions& with_progress(int value) {
    progress = value;
    return *this;
  }
  TrainerOptions& with_detect_anomaly(bool value) {
    detect_anomaly = value;
    return *this;
  }
  TrainerOptions& with_reproducible(bool value) {
    reproducible = value;
    return *this;
  }
  TrainerOptions& with_shards(int value) {
    shards = value;
    return *this;
  }
  TrainerOptions& with_precision(Precision value) {
    precision = value;
    return *this;
  }
  TrainerOptions& with_devices(std::vector<Device> value) {
    devices = std::move(value);
    return *this;
  }
  TrainerOptions& with_sampler_seed(uint64_t value) {
    sampler_seed = value;
    return *this;
  }
  TrainerOptions& with_record(std::map<std::string, double> value) {
    record = std::move(value);
    return *this;
  }
  TrainerOptions& with_record_series(std::map<std::string, std::vector<double>> value) {
    record_series = std::move(value);
    return *this;
  }
};

/// Loss and accuracy over every sample of an evaluation.
struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // NaN when the labels are not classes
  int64_t count = 0;      // samples over all ranks
  /// Regressions (targets that are not classes; NaN otherwise): the mean
  /// squared and absolute error over every target value, and R² = 1 - the
  /// squared errors / the targets' squared deviations, each target component
  /// about its own mean (scikit-learn's variance-weighted R²).
  double mse = std::nan(""), mae = std::nan(""), r2 = std::nan("");
};

/// The figures of one epoch.
struct EpochRecord {
  int64_t epoch = 0;
  int64_t step = 0;  // the global step at the epoch's end
  double loss = 0.0, accuracy = 0.0;
  double val_loss = 0.0, val_accuracy = 0.0;
  double val_mse = std::nan(""), val_mae = std::nan(""), val_r2 = std::nan("");  // regressions
  double bpb = std::nan(""), val_bpb = std::nan("");  // text: LoggingOptions::bytes_per_token
  double samples_per_s = 0.0, seconds = 0.0;
};

/// How a fit ended and what it measured.
struct FitResult {
  int64_t global_step = 0;
  int64_t epochs_completed = 0;
  bool stopped_by_signal = false;
  int signal = 0;
  bool early_stopped = false;
  std::string resumed_from;
  std::string last_checkpoint;
  std::string best_checkpoint;
  std::vector<EpochRecord> history;
  double wall_seconds = 0.0;
  double samples_per_s = 0.0;  // over all ranks
  /// The precision that ran (Auto resolved).
  Precision precision = Precision::fp32;
  /// How the steps ran: "default", or in reproducible mode "one pass" (a
  /// model that keeps a batch's rows apart: every shard in one forward and
  /// backward), "together" (with SyncBatchNorm) or "one by one".
  std::string step_strategy;
};

namespace detail {
enum class Monitor;  // TrainerOptions::monitor and ::resume, parsed
enum class Resume;
class FitRun;
}  // namespace detail

/// The training loop with checkpoints, resume, signals and evaluation.
class Trainer {
 public:
  Trainer(TrainerOptions options, dist::Communicator comm);

  FitResult fit(nn::Module& model, const nn::LossFunction& loss, optim::Optimizer& optimizer,
                data::DataLoader& train_loader, data::DataLoader* val_loader = nullptr,
                optim::LRScheduler* scheduler = nullptr);

  /// Loss and accuracy over the loader's samples on all ranks: each sample
  /// counted once when the loader's sampler is a DistributedSampler in exact
  /// mode. The loss function must average over its batch (as the built-in ones
  /// do by default).
  EvalResult evaluate(nn::Module& model, const nn::LossFunction& loss, data::DataLoader& loader);

  const TrainerOptions& options() const { return options_; }

  /// options().precision as this rank runs it (Auto resolved for its first
  /// device; fit() makes every rank agree on it).
  Precision precision() const { return precision_; }

 private:
  TrainerOptions options_;
  detail::Monitor monitor_;
  detail::Resume resume_;
  dist::Communicator comm_;
  Precision precision_ = Precision::fp32;
  friend class detail::FitRun;
};

/// The module inside DistributedDataParallel and DataParallel wrappers: the one
/// whose state dict has PyTorch's bare keys (what checkpoints store).
nn::Module& unwrap(nn::Module& model);

}  // namespace kdp::train
