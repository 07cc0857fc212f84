#include "fit_run.hpp"
#include "kdp/train/modes.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/check.hpp"
#include "core/numbers.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/stop_signal.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/data/distributed_sampler.hpp"
#include "kdp/io/run_directory_error.hpp"
#include "kdp/nn/clip_grad.hpp"
#include "kdp/ops/elementwise.hpp"
#include "kdp/ops/reduction.hpp"
#include "kdp/version.hpp"

namespace kdp::train::detail {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<float> read_scalars(const std::vector<Tensor>& scalars) {
  std::vector<Tensor> parts;
  for (const Tensor& t : scalars) {
    if (t.defined()) parts.push_back(t.reshape({1}));
  }
  std::vector<float> values = parts.empty() ? std::vector<float>() : cat(parts).to_vector();
  std::vector<float> out;
  size_t next = 0;
  for (const Tensor& t : scalars) out.push_back(t.defined() ? values[next++] : std::nanf(""));
  return out;
}

void broadcast_string(dist::Communicator& comm, std::string& text) {
  int64_t length = static_cast<int64_t>(text.size());
  comm.broadcast(&length, sizeof(length), 0);
  text.resize(static_cast<size_t>(length));
  if (length > 0) comm.broadcast(text.data(), text.size(), 0);
}

void on_rank0(dist::Communicator& comm, const std::function<void()>& work,
              const std::string& others) {
  int64_t kind = 0;  // 0: fine, 1: RunDirectoryError, 2: another kdp::Error
  int64_t reason = 0;
  std::string texts[3];
  if (comm.rank() == 0) {
    try {
      work();
    } catch (const io::RunDirectoryError& e) {
      kind = 1;
      reason = static_cast<int64_t>(e.reason());
      texts[0] = e.summary();
      texts[1] = e.details();
      texts[2] = e.way_out();
    } catch (const Error& e) {
      kind = 2;
      texts[0] = e.what();
    }
  }
  if (comm.size() > 1) {
    comm.broadcast(&kind, sizeof(kind), 0);
    comm.broadcast(&reason, sizeof(reason), 0);
    for (std::string& t : texts) broadcast_string(comm, t);
  }
  // Rank 0's error, rethrown on every rank as it was (its origin is in its text).
  if (kind == 1) {
    throw io::RunDirectoryError(static_cast<io::RunDirectoryError::Reason>(reason), texts[0],
                                texts[1], texts[2]);
  }
  if (kind == 2) throw IOError(comm.rank() == 0 ? texts[0] : others + texts[0]);
}

void MetricsLog::open(const std::string& path, const io::FileLock& file, uint64_t keep_bytes) {
  attempt(
      [&] {
        const int fd = ::dup(file.fd());  // the lock stays with the plan's descriptor
        KDP_CHECK(fd >= 0, IOError, "cannot open the metrics file '{}': {}", path,
                  describe_file_error(errno));
        writer_.emplace(path, fd, keep_bytes);
      },
      /*opening=*/true);
}

void MetricsLog::write(const std::string& type, const std::map<std::string, double>& values) {
  attempt([&] { writer_->write(type, values); });
}

void MetricsLog::sync() {
  attempt([&] { writer_->sync(); });
}

void MetricsLog::close() {
  attempt([&] { writer_->close(); });
  writer_.reset();
}

void MetricsLog::attempt(const std::function<void()>& f, bool opening) {
  if (failed() || (!writer_ && !opening)) return;
  try {
    f();
  } catch (const Error& e) {
    error_ = e.what();
    writer_.reset();
  }
}

namespace {

// The first parameter whose gradient holds a NaN or an Inf, or "" (reads every
// gradient's count: only for the error message).
std::string first_non_finite_grad(const optim::Optimizer& optimizer) {
  for (const auto& [name, p] : optimizer.parameters()) {
    if (p.grad().defined() && nn::non_finite_grad_count({p}).item() > 0.0f) return name;
  }
  return "";
}

}  // namespace

FitRun::FitRun(Trainer& trainer, TrainerOptions& options, Monitor monitor, Resume resume,
               dist::Communicator& comm, FitInputs in)
    : trainer_(trainer),
      o_(options),
      monitor_(monitor),
      resume_(resume),
      comm_(comm),
      in_(in),
      exchange_(in.model.gradient_exchange()),
      bare_(unwrap(in.model)),
      rank0_(comm.rank() == 0),
      classes_(in.train_loader.dataset().num_classes() > 0),
      batches_(in.train_loader.num_batches()),
      test_(TestSeam::from_environment(comm.rank())),
      config_(options.run_config),
      progress_(options.progress, options.log_every_steps, comm.rank() == 0),
      slices_(options.checkpoint_slices && in.optimizer.sharded() && comm.size() > 1),
      best_(std::nan("")) {
  // The settings that must not change while the run lives in its directory.
  for (auto& [key, value] : io::model_settings(bare_, in.optimizer)) config_[key] = value;
  config_["monitor"] = options.monitor;
}

FitResult FitRun::run() {
  agree_on_precision();
  agree_on_epoch();
  resume_or_start();
  start_trace();
  StopSignal stop;
  // A driver that installed the handler first (to catch a signal during its
  // start-up) keeps what arrived since; a Trainer on its own starts afresh.
  if (stop.outermost()) StopSignal::clear();
  reached_max_ = o_.max_steps >= 0 && global_step_ >= o_.max_steps;
  for (int64_t epoch = start_epoch_; epoch < o_.epochs && !reached_max_; ++epoch) {
    const Next next = train_epoch(epoch);
    if (result_.stopped_by_signal) {
      write_trace();
      return result_;
    }
    if (next == Next::Stop) break;
  }
  FitResult r = finish();
  write_trace();
  return r;
}

// Auto is bf16 only where every rank has bf16 matrix units: the ranks of one
// run compute in one precision.
void FitRun::agree_on_precision() {
  trainer_.precision_ = agree_precision(o_.precision, o_.devices.front(), comm_);
  result_.precision = trainer_.precision_;
}

// ---- where the run starts ------------------------------------------------------

void FitRun::resume_or_start() {
  // Rank 0 checks the directory and chooses the checkpoint; nothing is written
  // before every rank knows that the run may start.
  on_rank0(
      comm_, [&] { plan_ = plan_start(o_, resume_, config_, bare_, in_.optimizer); },
      "rank 0 could not start the run: ");
  for (const std::string& m : plan_.messages) progress_.message(m);
  broadcast_string(comm_, plan_.resume_path);
  if (!o_.checkpoint_dir.empty()) {
    checkpoints_ =
        std::make_unique<io::CheckpointDirectory>(o_.checkpoint_dir, o_.keep_last, config_);
  }
  if (!plan_.resume_path.empty()) load_resumed(plan_);
  if (rank0_ && !o_.metrics_path.empty()) {
    metrics_.open(o_.metrics_path, plan_.metrics_file, plan_.metrics_keep_bytes);
  }
}

// Every rank loads the checkpoint rank 0 chose; all stop if any cannot.
void FitRun::load_resumed(StartPlan& plan) {
  std::string error;
  io::TrainingState st;
  try {
    st = plan.resumed
             ? io::load_checkpoint(std::move(*plan.resumed), plan.resume_path, bare_, in_.optimizer)
             : io::load_checkpoint(plan.resume_path, bare_, in_.optimizer);
  } catch (const Error& e) {
    error = e.what();
  }
  int64_t failed = error.empty() ? 0 : 1;
  comm_.allreduce(&failed, 1, dist::ReduceOp::Max);
  if (failed != 0) {  // this rank's error as it was, or the origin of another's
    throw IOError(error.empty() ? fmt::format("kdp::train: another rank could not load '{}'",
                                              plan.resume_path)
                                : error);
  }
  plan.resumed.reset();
  apply(st, plan.resume_path);
}

// Where a checkpoint left off: position, generators, scheduler, best metric.
void FitRun::apply(const io::TrainingState& st, const std::string& from) {
  start_epoch_ = st.epoch;
  start_batch_ = st.batch_in_epoch;
  global_step_ = st.global_step;
  for (size_t d = 0; d < o_.devices.size() && d < st.rng.size(); ++d) {
    o_.devices[d].generator().set_state(st.rng[d].first, st.rng[d].second);
  }
  auto value = [&](const char* key, double fallback) {
    auto it = st.values.find(key);
    return it == st.values.end() ? fallback : it->second;
  };
  if (in_.scheduler != nullptr && st.values.count("scheduler.last_epoch") != 0) {
    try {
      in_.scheduler->load_state_dict(
          {{"last_epoch", value("scheduler.last_epoch", 0)},
           {"base_lr", value("scheduler.base_lr", in_.scheduler->base_lr())}});
    } catch (const ValueError& e) {  // the scheduler's error (with its origin), as the file's
      throw IOError(fmt::format("{} (the scheduler state in '{}')", e.what(), from));
    }
  }
  best_ = value("best_metric", std::nan(""));
  const double bad = value("bad_epochs", 0);
  KDP_CHECK(kdp::detail::is_count(bad), IOError,
            "training/bad_epochs = {} in '{}' is not a whole number >= 0", bad, from);
  bad_epochs_ = static_cast<int64_t>(bad);
  result_.resumed_from = from;
  // The position is global: batches of the global batch, the same samples at
  // any number of ranks and devices (with a sampler whose batches over all
  // ranks do not depend on their number: DistributedSampler's exact mode).
  const double written_batch = value("global_batch", static_cast<double>(global_batch_));
  KDP_CHECK(written_batch == static_cast<double>(global_batch_), IOError,
            "'{}' stopped after {} batches of {} samples over all ranks; this run's batch is {} "
            "samples (batch size x ranks): resume with the same global batch",
            from, st.batch_in_epoch, written_batch, global_batch_);
  if (st.world_size != comm_.size() ||
      st.devices_per_rank != static_cast<int64_t>(o_.devices.size())) {
    progress_.message(fmt::format(
        "note: {} was written by {} rank(s) x {} device(s), this run has {} x {}; it goes on "
        "at sample {} of epoch {}",
        from, st.world_size, st.devices_per_rank, comm_.size(), o_.devices.size(),
        st.batch_in_epoch * global_batch_, st.epoch + 1));
  }
  progress_.message(fmt::format("resumed from {} (epoch {}, batch {}, step {})", from, st.epoch + 1,
                                st.batch_in_epoch, st.global_step));
}

// ---- an epoch -------------------------------------------------------------------

FitRun::Next FitRun::train_epoch(int64_t epoch) {
  data::DataLoader& loader = in_.train_loader;
  loader.set_epoch(epoch);
  Epoch e(o_.devices.front(), strategy_->shards());
  e.index = epoch;
  e.batch = epoch == start_epoch_ ? start_batch_ : 0;
  if (e.batch > 0) loader.set_start_batch(e.batch);
  in_.model.train();
  progress_.start_epoch(epoch, o_.epochs, batches_);
  e.wait_before = loader.wait_seconds();
  e.comm_before = exchange_ != nullptr ? exchange_->comm_wait_seconds() : 0.0;
  e.start = Clock::now();
  const int64_t accum = o_.accumulate_grad_batches;
  bool stopped = false;
  for (data::Batch& b : loader) {
    const bool last_micro = (e.batch + 1) % accum == 0 || e.batch + 1 == batches_;
    train_micro_batch(e, &b, last_micro);
    if (last_micro && train_step(e) == Next::Stop) {
      stopped = true;
      break;
    }
  }
  // This rank's share ran out before the others': it takes part in the
  // remaining batches with no samples.
  while (!stopped && e.batch < batches_) {
    const bool last_micro = (e.batch + 1) % accum == 0 || e.batch + 1 == batches_;
    train_micro_batch(e, nullptr, last_micro);
    stopped = last_micro && train_step(e) == Next::Stop;
  }
  samples_total_ += e.samples;
  if (result_.stopped_by_signal) return Next::Stop;
  if (reached_max_ && e.batch < batches_) {  // stopped inside the epoch
    save(epoch, e.batch);
    return Next::Stop;
  }
  return end_epoch(e);
}

// Forward and backward of one micro-batch, as the step strategy goes (`b`
// null: this rank has no share of it).
void FitRun::train_micro_batch(Epoch& e, const data::Batch* b, bool last_micro) {
  MicroBatch m;
  m.batch = b;
  if (b == nullptr && strategy_->runs_stand_in()) m.stand_in = &stand_in_batch(e.index);
  m.last_of_step = last_micro;
  m.last_of_epoch = e.batch + 1 == batches_;
  m.step = global_step_;
  m.epoch = e.index;
  m.index = e.batch;
  const Tensor checked = strategy_->micro_batch(m, e.running);
  ++e.batch;
  NoGradGuard no_grad;
  if (checked.defined()) e.step_loss = e.step_loss.defined() ? e.step_loss + checked : checked;
  if (b == nullptr) return;
  last_batch_ = *b;
  e.samples += b->features.size(0);
  test_.log_samples(e.index, global_step_ + 1, b->indices);
}

// The optimizer step after the checks, then what the step shows and writes,
// the signals and the step-based checkpoints and limits.
FitRun::Next FitRun::train_step(Epoch& e) {
  const StepProbe probe = probe_step(e);
  check_step(e, probe);
  {
    trace::Region region("kdp::train::optimizer", "compute");
    in_.optimizer.step();
    // An exchange may keep the gradients as views into its buffers.
    in_.optimizer.zero_grad(
        /*set_to_none=*/exchange_ == nullptr || !exchange_->keeps_gradient_storage());
  }
  ++global_step_;
  trace::set_step(global_step_ + 1);
  if (in_.scheduler != nullptr && o_.step_scheduler_per_batch) in_.scheduler->step();
  if (probe.show || probe.log_row) log_step(e, probe);
  if (stop_for_signal_or_failure(e) == Next::Stop) return Next::Stop;
  if (checkpoints_ && o_.checkpoint_every_steps > 0 &&
      global_step_ % o_.checkpoint_every_steps == 0 && e.batch < batches_) {
    save(e.index, e.batch);
  }
  if (o_.max_steps >= 0 && global_step_ >= o_.max_steps) {
    reached_max_ = true;
    return Next::Stop;
  }
  return Next::Continue;
}

// What this step must read: the loss and the gradients' health (anomaly
// checks), the running figures (progress, metrics). One copy holds all.
FitRun::StepProbe FitRun::probe_step(Epoch& e) {
  StepProbe p;
  p.step = global_step_ + 1;
  p.show = progress_.shows(p.step, e.batch == batches_);
  p.log_row = metrics_.active() && p.step % std::max<int64_t>(1, o_.log_every_steps) == 0;
  const bool check = o_.detect_anomaly;
  std::vector<Tensor> params;
  if (check || o_.gradient_clip_norm > 0.0) {
    for (const auto& [name, t] : in_.optimizer.parameters()) params.push_back(t);
  }
  const Tensor bad_values = check ? nn::non_finite_grad_count(params) : Tensor();
  Tensor norm;
  if (o_.gradient_clip_norm > 0.0) norm = nn::clip_grad_norm(params, o_.gradient_clip_norm);
  p.has_norm = norm.defined();
  if (check || p.show || p.log_row) {
    p.values = read_scalars({e.step_loss, bad_values, e.running.loss_sum, e.running.correct, norm});
  }
  // Every rank knows which steps have a metrics row (progress bars draw by
  // the clock: theirs show this rank's figures in between).
  const int64_t every = std::max<int64_t>(1, o_.log_every_steps);
  if (strategy_->shards() > 0 && (p.step % every == 0 || e.batch == batches_))
    p.everywhere = running_everywhere(e);
  e.step_loss = Tensor();
  return p;
}

// Reproducible mode's running loss sum, correct count and samples over every
// rank: each shard's sums are made on the one rank that holds it and added
// here in shard order, so the figures are the same bits at every layout (an
// allreduce adds each to zeros).
std::array<double, 3> FitRun::running_everywhere(const Epoch& e) {
  const std::vector<float> loss = e.running.shard_loss.to_vector();
  const std::vector<float> correct = e.running.shard_correct.to_vector();
  const size_t shards = loss.size();
  std::vector<double> all(2 * shards + 1);
  for (size_t s = 0; s < shards; ++s) {
    all[s] = loss[s];
    all[shards + s] = correct[s];
  }
  all[2 * shards] = static_cast<double>(e.samples);
  comm_.allreduce(all.data(), all.size(), dist::ReduceOp::Sum);
  std::array<double, 3> sums{0.0, 0.0, all[2 * shards]};
  for (size_t s = 0; s < shards; ++s) {
    sums[0] += all[s];
    sums[1] += all[shards + s];
  }
  return sums;
}

// A NaN or Inf stops training before the optimizer step.
void FitRun::check_step(const Epoch& e, const StepProbe& p) const {
  if (!o_.detect_anomaly) return;
  KDP_CHECK(std::isfinite(p.values[0]), NumericalError,
            "the loss is {} at step {} (epoch {}, batch {}) on rank {}; training "
            "stopped before the optimizer step, no checkpoint was written after it",
            p.values[0], p.step, e.index + 1, e.batch - 1, comm_.rank());
  KDP_CHECK(p.values[1] <= 0.0f, NumericalError,
            "the gradient of '{}' holds NaN or Inf at step {} (epoch {}, batch {}) on "
            "rank {}; training stopped before the optimizer step",
            first_non_finite_grad(in_.optimizer), p.step, e.index + 1, e.batch - 1, comm_.rank());
}

void FitRun::log_step(const Epoch& e, const StepProbe& p) {
  // This rank's running figures, or reproducible mode's over every rank.
  const std::array<double, 3> sums =
      p.everywhere
          ? *p.everywhere
          : std::array<double, 3>{p.values[2], p.values[3], static_cast<double>(e.samples)};
  const double count = std::max(1.0, sums[2]);
  const double elapsed = seconds_since(e.start);
  const double rate = elapsed > 0 ? static_cast<double>(e.samples) * comm_.size() / elapsed : 0.0;
  const double loss_avg = sums[0] / count;
  const double acc_avg = classes_ ? sums[1] / count : std::nan("");
  if (p.show) progress_.step(e.batch - 1, global_step_, loss_avg, acc_avg, rate);
  if (!p.log_row) return;
  metrics_.write(
      "step",
      {{"epoch", static_cast<double>(e.index + 1)},
       {"step", static_cast<double>(global_step_)},
       {"loss", loss_avg},
       {"accuracy", acc_avg},
       {"lr", in_.optimizer.lr()},
       {"samples_per_s", rate},
       {"data_wait_s", in_.train_loader.wait_seconds() - e.wait_before},
       {"comm_s", exchange_ != nullptr ? exchange_->comm_wait_seconds() - e.comm_before : 0.0},
       {"grad_norm", p.has_norm ? p.values[4] : std::nan("")}});
}

// Every rank stops after the same step when any of them got a signal, or when
// rank 0 could not write its metrics (one collective for both).
FitRun::Next FitRun::stop_for_signal_or_failure(const Epoch& e) {
  int64_t flags[2] = {StopSignal::requested() ? StopSignal::signal() : 0,
                      metrics_.failed() ? 1 : 0};
  comm_.allreduce(flags, 2, dist::ReduceOp::Max);
  if (flags[1] != 0) stop_if_metrics_failed(std::make_pair(e.index, e.batch));
  const int64_t signal = flags[0];
  if (signal == 0) return Next::Continue;
  save(e.index, e.batch);
  metrics_.close();
  stop_if_metrics_failed(std::nullopt);
  result_.stopped_by_signal = true;
  result_.signal = static_cast<int>(signal);
  progress_.end_epoch(fmt::format("stopped by signal {} at step {}; {}", signal, global_step_,
                                  result_.last_checkpoint.empty()
                                      ? std::string("no checkpoint (no checkpoint directory)")
                                      : "checkpoint " + result_.last_checkpoint));
  result_.global_step = global_step_;
  result_.wall_seconds = seconds_since(fit_start_);
  return Next::Stop;
}

// ---- the end of an epoch ----------------------------------------------------------

FitRun::Next FitRun::end_epoch(Epoch& e) {
  const EpochRecord rec = epoch_record(e);
  if (in_.scheduler != nullptr && !o_.step_scheduler_per_batch) in_.scheduler->step();
  result_.history.push_back(rec);
  result_.epochs_completed = e.index + 1;
  const double monitored = monitored_value(monitor_, rec);
  bool improved = false;
  if (std::isfinite(monitored)) {
    const double delta = o_.early_stopping_min_delta;
    improved = std::isnan(best_) ||
               (maximised(monitor_) ? monitored > best_ + delta : monitored < best_ - delta);
    if (improved) {
      best_ = monitored;
      bad_epochs_ = 0;
    } else {
      ++bad_epochs_;
    }
  }
  checkpoint_policy(e.index, improved);
  if (metrics_.active()) {
    metrics_.write(
        "epoch",
        {{"epoch", static_cast<double>(e.index + 1)},
         {"step", static_cast<double>(global_step_)},
         {"loss", rec.loss},
         {"accuracy", rec.accuracy},
         {"lr", in_.optimizer.lr()},
         {"samples_per_s", rec.samples_per_s},
         {"data_wait_s", in_.train_loader.wait_seconds() - e.wait_before},
         {"comm_s", exchange_ != nullptr ? exchange_->comm_wait_seconds() - e.comm_before : 0.0},
         {"val_loss", rec.val_loss},
         {"val_accuracy", rec.val_accuracy},
         {"val_mse", rec.val_mse},
         {"val_mae", rec.val_mae},
         {"val_r2", rec.val_r2},
         {"bpb", rec.bpb},
         {"val_bpb", rec.val_bpb}});
    metrics_.sync();
  }
  stop_if_metrics_failed(std::nullopt);  // the epoch's checkpoint is written already
  report_epoch(e, rec);
  return stopping_rule(monitored) ? Next::Stop : Next::Continue;
}

// The epoch's figures over every rank, and the validation.
EpochRecord FitRun::epoch_record(const Epoch& e) {
  std::array<double, 3> sums;
  if (strategy_->shards() > 0) {
    sums = running_everywhere(e);
  } else {
    const std::vector<float> totals = read_scalars({e.running.loss_sum, e.running.correct});
    sums = {totals[0], totals[1], static_cast<double>(e.samples)};
    comm_.allreduce(sums.data(), 3, dist::ReduceOp::Sum);
  }
  EpochRecord rec;
  rec.epoch = e.index + 1;
  rec.step = global_step_;
  rec.seconds = seconds_since(e.start);
  rec.loss = sums[0] / std::max(1.0, sums[2]);
  rec.accuracy = classes_ ? sums[1] / std::max(1.0, sums[2]) : std::nan("");
  rec.samples_per_s = rec.seconds > 0 ? sums[2] / rec.seconds : 0.0;
  rec.val_loss = rec.val_accuracy = std::nan("");
  if (in_.val_loader != nullptr) {
    const EvalResult v = trainer_.evaluate(in_.model, in_.loss, *in_.val_loader);
    rec.val_loss = v.loss;
    rec.val_accuracy = v.accuracy;
    rec.val_mse = v.mse;
    rec.val_mae = v.mae;
    rec.val_r2 = v.r2;
  }
  if (o_.bytes_per_token > 0.0) {  // nats per token -> bits per byte of text
    const double per = 1.0 / (std::log(2.0) * o_.bytes_per_token);
    rec.bpb = rec.loss * per;
    rec.val_bpb = rec.val_loss * per;
  }
  return rec;
}

// The epoch's checkpoint, and best.h5 when the monitored metric improved.
void FitRun::checkpoint_policy(int64_t epoch, bool improved) {
  if (!checkpoints_) return;
  if (o_.checkpoint_every_epoch) save(epoch + 1, 0);
  if (!o_.keep_best || !improved) return;
  if (write_checkpoint(state_at(epoch + 1, 0), /*best=*/true)) {
    result_.best_checkpoint = checkpoints_->best_path();
  }
}

// Early stopping on patience, and the stopping threshold.
bool FitRun::stopping_rule(double monitored) {
  if (o_.early_stopping_patience > 0 && bad_epochs_ >= o_.early_stopping_patience) {
    result_.early_stopped = true;
    progress_.message(
        fmt::format("early stopping: {} did not improve for {} epochs", o_.monitor, bad_epochs_));
    return true;
  }
  const double goal = o_.stopping_threshold;
  if (std::isfinite(monitored) && !std::isnan(goal) &&
      (maximised(monitor_) ? monitored >= goal : monitored <= goal)) {
    result_.early_stopped = true;
    progress_.message(fmt::format("stopping: {} reached {} ({:.4f})", o_.monitor, goal, monitored));
    return true;
  }
  return false;
}

void FitRun::report_epoch(const Epoch& e, const EpochRecord& rec) {
  // A regression's losses may be far below 1: significant digits, not decimals.
  const char* loss_format = classes_ ? "{:.4f}" : "{:.4g}";
  std::string summary = fmt::format("epoch {}/{}: loss {}", e.index + 1, o_.epochs,
                                    fmt::format(loss_format, rec.loss));
  if (!std::isnan(rec.bpb)) summary += fmt::format(" bpb {:.3f}", rec.bpb);
  if (classes_) summary += fmt::format(" acc {:.4f}", rec.accuracy);
  if (in_.val_loader != nullptr) {
    summary += fmt::format(" val_loss {}", fmt::format(loss_format, rec.val_loss));
    if (!std::isnan(rec.val_bpb)) summary += fmt::format(" val_bpb {:.3f}", rec.val_bpb);
    if (!std::isnan(rec.val_accuracy)) summary += fmt::format(" val_acc {:.4f}", rec.val_accuracy);
    if (!std::isnan(rec.val_mae)) {
      summary += fmt::format(" val_mae {:.4g} val_r2 {:.4f}", rec.val_mae, rec.val_r2);
    }
  }
  summary += fmt::format(" ({:.0f} samples/s, {:.1f} s)", rec.samples_per_s, rec.seconds);
  progress_.end_epoch(summary);
}

// ---- checkpoints and the end of the run ------------------------------------------

io::TrainingState FitRun::state_at(int64_t epoch, int64_t batch) const {
  io::TrainingState st;
  st.epoch = epoch;
  st.batch_in_epoch = batch;
  st.global_step = global_step_;
  st.sampler_seed = o_.sampler_seed;
  st.world_size = comm_.size();
  st.devices_per_rank = static_cast<int64_t>(o_.devices.size());
  st.kdp_version = version_string;
  for (const Device& d : o_.devices)
    st.rng.emplace_back(d.generator().seed(), d.generator().offset());
  if (in_.scheduler != nullptr) {
    st.values["scheduler.last_epoch"] = static_cast<double>(in_.scheduler->last_epoch());
    st.values["scheduler.base_lr"] = in_.scheduler->base_lr();
  }
  for (const auto& [key, v] : o_.record) st.values[key] = v;
  st.series = o_.record_series;
  st.values["best_metric"] = best_;
  st.values["global_batch"] = static_cast<double>(global_batch_);
  st.values["bad_epochs"] = static_cast<double>(bad_epochs_);
  return st;
}

std::string FitRun::save(int64_t epoch, int64_t batch) {
  if (!checkpoints_) return "";
  const std::string path = checkpoints_->path_for(global_step_);
  write_checkpoint(state_at(epoch, batch), /*best=*/false);
  result_.last_checkpoint = path;
  return path;
}

// A metrics file that cannot be written stops every rank, as a checkpoint that
// cannot be written does: after saving one when it can (`save_at`).
void FitRun::stop_if_metrics_failed(std::optional<std::pair<int64_t, int64_t>> save_at) {
  int64_t failed = metrics_.failed() ? 1 : 0;
  comm_.allreduce(&failed, 1, dist::ReduceOp::Max);
  if (failed == 0) return;
  std::string saved = checkpoints_ ? "" : "no checkpoint_dir, so no checkpoint";
  if (checkpoints_ && save_at) {
    try {
      saved = fmt::format("checkpoint {} written", save(save_at->first, save_at->second));
    } catch (const Error& e) {
      saved = fmt::format("no checkpoint either: {}", e.what());
    }
  } else if (checkpoints_) {
    saved = fmt::format("last checkpoint {}", result_.last_checkpoint);
  }
  std::string error = metrics_.error();
  broadcast_string(comm_, error);
  // The metrics writer's error (with its origin) and where training stopped.
  throw IOError(fmt::format("{}{}; training stopped at step {} ({})",
                            rank0_ ? "" : "rank 0 could not write its metrics: ", error,
                            global_step_, saved));
}

FitResult FitRun::finish() {
  if (checkpoints_ && result_.last_checkpoint.empty()) save(start_epoch_, start_batch_);
  metrics_.close();
  stop_if_metrics_failed(std::nullopt);
  result_.global_step = global_step_;
  result_.wall_seconds = seconds_since(fit_start_);
  result_.samples_per_s = result_.wall_seconds > 0 ? static_cast<double>(samples_total_) *
                                                         comm_.size() / result_.wall_seconds
                                                   : 0.0;
  return result_;
}

}  // namespace kdp::train::detail
