#pragma once
// Trainer::fit in named steps. A FitRun holds one call's state (where the run
// stands, its files, its progress) and runs it: resume_or_start, then
// train_epoch for each epoch (train_step for each optimizer step), end_epoch
// with the checkpoint policy and the stopping rules, and finish.

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exact/exact_gradient.hpp"
#include "exact/shard_batch_norm.hpp"
#include "exact/shard_pass.hpp"
#include "exact/shard_replicas.hpp"
#include "kdp/core/threads.hpp"
#include "kdp/io/checkpoint_directory.hpp"
#include "kdp/nn/gradient_exchange.hpp"
#include "kdp/train/metrics_writer.hpp"
#include "kdp/train/progress.hpp"
#include "kdp/train/trainer.hpp"
#include "run_options.hpp"
#include "start_plan.hpp"

namespace kdp::train::detail {

// Reproducible mode's wing (src/exact/), which FitRun drives.
using exact::batch_norm_refusal;
using exact::ExactGradient;
using exact::one_pass_parameters;
using exact::one_pass_precision;
using exact::shard_rows;
using exact::ShardBatchNorm;
using exact::ShardReplicas;
using exact::ShardRows;
using exact::ShardSlots;
using exact::strided_rows;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t);

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

/// Scalar tensors (undefined ones read as NaN) read back in one copy.
std::vector<float> read_scalars(const std::vector<Tensor>& scalars);

/// Gives every rank rank 0's `text`.
void broadcast_string(dist::Communicator& comm, std::string& text);

/// Runs `work` on rank 0 alone, then every rank throws what it threw: the same
/// io::RunDirectoryError everywhere, or an IOError with rank 0's message (on
/// the other ranks after `others`). A full disk thus stops every rank with
/// one error instead of leaving some of them waiting in a collective.
void on_rank0(dist::Communicator& comm, const std::function<void()>& work,
              const std::string& others);

/// Rank 0's metrics rows. A write that fails is remembered, not thrown, so
/// that every rank learns of it at the next check and all stop together.
class MetricsLog {
 public:
  void open(const std::string& path, const io::FileLock& file, uint64_t keep_bytes);
  bool active() const { return writer_.has_value(); }
  void write(const std::string& type, const std::map<std::string, double>& values);
  void sync();
  void close();
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  // Runs `f` on an open writer; without one (no metrics, or failed) nothing.
  void attempt(const std::function<void()>& f, bool opening = false);
  std::optional<MetricsWriter> writer_;
  std::string error_;
};

/// What one call of Trainer::fit works with.
struct FitInputs {
  nn::Module& model;
  const nn::LossFunction& loss;
  optim::Optimizer& optimizer;
  data::DataLoader& train_loader;
  data::DataLoader* val_loader;
  optim::LRScheduler* scheduler;
};

/// One call of Trainer::fit.
class FitRun {
 public:
  FitRun(Trainer& trainer, TrainerOptions& options, Monitor monitor, Resume resume,
         dist::Communicator& comm, FitInputs in);
  FitResult run();

 private:
  // An epoch under way: its sums on the device, its counts and clocks.
  struct Epoch {
    int64_t index = 0;
    int64_t batch = 0;  // the next batch
    int64_t samples = 0;
    EpochSums running;
    Clock::time_point start = Clock::now();
    double wait_before = 0.0, comm_before = 0.0;
    Tensor step_loss;  // this step's micro-batch losses, summed (for anomaly checks)
    Epoch(const Device& device, int shards) : running(device, shards) {}
  };
  // What a step read back from the device in one copy.
  struct StepProbe {
    int64_t step = 0;
    bool show = false, log_row = false;
    std::vector<float> values;  // step loss, bad gradient values, loss sum, correct, norm
    bool has_norm = false;
    // Reproducible mode's loss sum, correct count and samples over every rank
    // (on the steps whose metrics row every rank knows of).
    std::optional<std::array<double, 3>> everywhere;
  };
  enum class Next { Continue, Stop };

  void resume_or_start();
  void load_resumed(StartPlan& plan);
  void apply(const io::TrainingState& st, const std::string& from);
  Next train_epoch(int64_t epoch);
  void train_micro_batch(Epoch& e, const data::Batch* b, bool last_micro);
  void train_shards(Epoch& e, const data::Batch* b, bool last_micro);
  std::array<double, 3> running_everywhere(const Epoch& e);
  Tensor shards_one_by_one(Epoch& e, const data::Batch& b, const std::vector<ShardRows>& shards,
                           int64_t total, int filled);
  Tensor shards_together(Epoch& e, const data::Batch& b, const std::vector<ShardRows>& shards,
                         int64_t total);
  bool takes_one_pass(const data::Batch& b);
  Tensor shards_in_one_pass(Epoch& e, const data::Batch& b, const std::vector<ShardRows>& shards,
                            int64_t total);
  float shard_weight(int64_t samples, int64_t total) const;
  std::vector<uint64_t> sample_keys(const data::Batch& b, const ShardRows& rows) const;
  void check_reproducible() const;
  void log_samples(const Epoch& e, const data::Batch& b) const;
  const data::Batch& stand_in_batch(int64_t epoch);
  float share_of_last_batch(int64_t samples);
  Next train_step(Epoch& e);
  StepProbe probe_step(Epoch& e);
  void check_step(const Epoch& e, const StepProbe& p) const;
  void log_step(const Epoch& e, const StepProbe& p);
  Next stop_for_signal_or_failure(const Epoch& e);
  Next end_epoch(Epoch& e);
  EpochRecord epoch_record(const Epoch& e);
  void checkpoint_policy(int64_t epoch, bool improved);
  bool stopping_rule(double monitored);
  void report_epoch(const Epoch& e, const EpochRecord& rec);
  io::TrainingState state_at(int64_t epoch, int64_t batch) const;
  std::string save(int64_t epoch, int64_t batch);
  bool write_checkpoint(const io::TrainingState& st, bool best);
  std::optional<bool> write_sliced(const io::TrainingState& st, bool best);
  void stop_if_metrics_failed(std::optional<std::pair<int64_t, int64_t>> save_at);
  FitResult finish();
  void agree_on_precision();
  void agree_on_epoch();
  void start_trace();
  void write_trace();

  Trainer& trainer_;
  TrainerOptions& o_;
  const Monitor monitor_;
  const Resume resume_;
  dist::Communicator& comm_;
  FitInputs in_;
  nn::GradientExchange* exchange_;  // the model's (DDP's), or null
  nn::Module& bare_;                // what checkpoints hold
  const bool rank0_;
  const bool classes_;
  int64_t batches_;                        // per epoch, the same on every rank (agree_on_epoch)
  int64_t global_batch_ = 0;               // samples per batch over all ranks
  std::optional<data::Batch> last_batch_;  // stand_in_batch()
  std::unique_ptr<ExactGradient> exact_;   // reproducible mode
  std::optional<ScopedBlasThreads> one_blas_thread_;  // and its products
  std::unique_ptr<ShardBatchNorm> shard_bn_;          // and its BatchNorm layers
  std::unique_ptr<ShardReplicas> replicas_;           // and its SyncBatchNorm layers
  bool synchronised_ = false;                         // (the model has some)
  std::map<const TensorImpl*, size_t> one_pass_;      // shards_in_one_pass's parameters
  int one_pass_dims_ = -1;                            // the batches' dimensions it was found for
  std::string sample_log_;  // KDP_TEST_SAMPLE_LOG: every sample trained on
  const Clock::time_point fit_start_ = Clock::now();
  Clock::time_point trace_origin_;
  std::string trace_path_;  // o_.trace_path, or its resumed part's name
  bool tracing_ = false;
  double test_delay_s_ = 0.0;  // KDP_TEST_DELAY_RANK on this rank
  void straggle() const;       // sleeps test_delay_s_ (in a micro-batch's forward)

  io::RunConfig config_;
  Progress progress_;
  std::unique_ptr<io::CheckpointDirectory> checkpoints_;
  bool slices_;  // every rank writes its slice of a sharded optimizer's state
  MetricsLog metrics_;
  StartPlan plan_;
  FitResult result_;

  int64_t start_epoch_ = 0, start_batch_ = 0, global_step_ = 0, bad_epochs_ = 0;
  int64_t samples_total_ = 0;
  double best_;
  bool reached_max_ = false;
};

}  // namespace kdp::train::detail
