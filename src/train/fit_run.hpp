#pragma once
// Trainer::fit in named steps. A FitRun holds one call's state (where the run
// stands, its files, its progress) and runs it: agree_on_precision and
// agree_on_epoch (which choose the step strategy, step_strategy.hpp), then
// resume_or_start, then train_epoch for each epoch (the strategy's
// micro-batches, train_step for each optimizer step), end_epoch with the
// checkpoint policy and the stopping rules, and finish.

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kdp/io/checkpoint_directory.hpp"
#include "kdp/nn/gradient_exchange.hpp"
#include "kdp/train/metrics_writer.hpp"
#include "kdp/train/progress.hpp"
#include "kdp/train/trainer.hpp"
#include "run_options.hpp"
#include "start_plan.hpp"
#include "step_strategy.hpp"
#include "test_seam.hpp"

namespace kdp::train::detail {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t);

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
  std::array<double, 3> running_everywhere(const Epoch& e);
  const data::Batch& stand_in_batch(int64_t epoch);
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
  const TestSeam test_;
  std::unique_ptr<StepStrategy> strategy_;  // chosen by agree_on_epoch
  const Clock::time_point fit_start_ = Clock::now();
  Clock::time_point trace_origin_;
  std::string trace_path_;  // o_.trace_path, or its resumed part's name
  bool tracing_ = false;

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
