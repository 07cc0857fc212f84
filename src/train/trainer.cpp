#include "kdp/train/trainer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>

#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/numbers.hpp"
#include "kdp/core/stop_signal.hpp"
#include "kdp/dist/distributed_data_parallel.hpp"
#include "kdp/io/checkpoint_directory.hpp"
#include "kdp/io/run_directory_error.hpp"
#include "kdp/nn/clip_grad.hpp"
#include "kdp/ops/elementwise.hpp"
#include "kdp/ops/reduction.hpp"
#include "kdp/parallel/data_parallel.hpp"
#include "kdp/train/metrics_writer.hpp"
#include "kdp/train/progress.hpp"
#include "kdp/version.hpp"
#include "start_plan.hpp"

namespace kdp::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Loss and correct predictions summed over an epoch, on the device.
struct EpochSums {
  Tensor loss_sum, correct;
  explicit EpochSums(const Device& device)
      : loss_sum(Tensor::zeros(Shape{}, device)), correct(Tensor::zeros(Shape{}, device)) {}
  // loss: the batch's mean loss over n samples; out: logits when the labels are
  // classes (undefined otherwise).
  void add(const Tensor& loss, float n, const Tensor& out, const Tensor& labels) {
    loss_sum.add_(loss.to(loss_sum.device()), n);
    if (out.defined() && out.dim() == 2 && labels.dim() == 1) {
      correct.add_(count_correct(out, labels.to(out.device())).to(correct.device()));
    }
  }
};

// Scalar tensors (undefined ones read as NaN) read back in one copy.
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

bool maximise(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos;
}

// The first parameter whose gradient holds a NaN or an Inf, or "" (reads every
// gradient's count: only for the error message).
std::string first_non_finite_grad(const optim::Optimizer& optimizer) {
  for (const auto& [name, p] : optimizer.parameters()) {
    if (p.grad().defined() && nn::non_finite_grad_count({p}).item() > 0.0f) return name;
  }
  return "";
}

// Rank 0's metrics rows. A write that fails is remembered, not thrown, so that
// every rank learns of it at the next check and all stop together.
class MetricsLog {
 public:
  void open(const std::string& path, const io::FileLock& file, uint64_t keep_bytes) {
    attempt(
        [&] {
          const int fd = ::dup(file.fd());  // the lock stays with the plan's descriptor
          if (fd < 0) {
            throw IOError(fmt::format("kdp::train: cannot open the metrics file '{}': {}", path,
                                      describe_file_error(errno)));
          }
          writer_.emplace(path, fd, keep_bytes);
        },
        /*opening=*/true);
  }
  bool active() const { return writer_.has_value(); }
  void write(const std::string& type, const std::map<std::string, double>& values) {
    attempt([&] { writer_->write(type, values); });
  }
  void sync() {
    attempt([&] { writer_->sync(); });
  }
  void close() {
    attempt([&] { writer_->close(); });
    writer_.reset();
  }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  // Runs `f` on an open writer; without one (no metrics, or failed) nothing.
  void attempt(const std::function<void()>& f, bool opening = false) {
    if (failed() || (!writer_ && !opening)) return;
    try {
      f();
    } catch (const Error& e) {
      error_ = e.what();
      writer_.reset();
    }
  }
  std::optional<MetricsWriter> writer_;
  std::string error_;
};

void broadcast_string(dist::Communicator& comm, std::string& text) {
  int64_t length = static_cast<int64_t>(text.size());
  comm.broadcast(&length, sizeof(length), 0);
  text.resize(static_cast<size_t>(length));
  if (length > 0) comm.broadcast(text.data(), text.size(), 0);
}

// Runs `decide` on rank 0 and makes every rank throw what it threw: the same
// RunDirectoryError everywhere, or an error naming rank 0's.
void decide_on_rank0(dist::Communicator& comm, const std::function<void()>& decide) {
  int64_t kind = 0;  // 0: fine, 1: RunDirectoryError, 2: another kdp::Error
  int64_t reason = 0;
  std::string texts[3];
  if (comm.rank() == 0) {
    try {
      decide();
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
  if (kind == 1) {
    throw io::RunDirectoryError(static_cast<io::RunDirectoryError::Reason>(reason), texts[0],
                                texts[1], texts[2]);
  }
  if (kind == 2) {
    if (comm.rank() == 0) throw IOError(texts[0]);
    throw IOError(fmt::format("rank 0 could not start the run: {}", texts[0]));
  }
}

}  // namespace

nn::Module& unwrap(nn::Module& model) {
  nn::Module* m = &model;
  for (;;) {
    if (auto* ddp = dynamic_cast<dist::DistributedDataParallel*>(m)) {
      m = ddp->module().get();
    } else if (auto* dp = dynamic_cast<DataParallel*>(m)) {
      m = dp->module().get();
    } else {
      return *m;
    }
  }
}

Trainer::Trainer(TrainerOptions options, dist::Communicator comm)
    : options_(std::move(options)), comm_(std::move(comm)) {
  if (options_.epochs < 0 || options_.accumulate_grad_batches < 1) {
    throw ValueError(
        fmt::format("kdp::train::Trainer: epochs {} must be >= 0 and "
                    "accumulate_grad_batches {} >= 1",
                    options_.epochs, options_.accumulate_grad_batches));
  }
  const std::string& m = options_.monitor;
  if (m != "val_loss" && m != "val_accuracy" && m != "loss" && m != "accuracy") {
    throw ValueError(
        fmt::format("kdp::train::Trainer: cannot monitor '{}' (val_loss, "
                    "val_accuracy, loss or accuracy)",
                    m));
  }
  if (options_.resume == "auto" && options_.checkpoint_dir.empty()) {
    throw ValueError("kdp::train::Trainer: resume = auto needs a checkpoint_dir");
  }
  if (options_.overwrite && !options_.resume.empty() && options_.resume != "never") {
    throw ValueError(fmt::format(
        "kdp::train::Trainer: overwrite discards what is there; it goes with a fresh start "
        "(resume = \"never\"), not with resume = \"{}\"",
        options_.resume));
  }
  if (options_.devices.empty()) options_.devices.push_back(get_default_device());
}

EvalResult Trainer::evaluate(nn::Module& model, const nn::LossFunction& loss,
                             data::DataLoader& loader) {
  // Evaluation needs no gradient exchange: run the module inside DDP, so ranks
  // with one batch more or less than the others never wait for each other.
  nn::Module& local = dynamic_cast<dist::DistributedDataParallel*>(&model) != nullptr
                          ? *dynamic_cast<dist::DistributedDataParallel&>(model).module()
                          : model;
  const bool was_training = local.is_training();
  local.eval();
  NoGradGuard no_grad;
  const bool classes = loader.dataset().num_classes() > 0;
  EpochSums running(options_.devices.front());
  int64_t samples = 0;
  for (data::Batch& b : loader) {
    const Tensor out = local.forward(b.features);
    const auto n = b.features.size(0);
    running.add(loss(out, b.labels), static_cast<float>(n), classes ? out : Tensor(), b.labels);
    samples += n;
  }
  local.train(was_training);
  const std::vector<float> totals = read_scalars({running.loss_sum, running.correct});
  double sums[3] = {totals[0], totals[1], static_cast<double>(samples)};
  comm_.allreduce(sums, 3, dist::ReduceOp::Sum);
  EvalResult r;
  r.count = static_cast<int64_t>(sums[2]);
  r.loss = sums[2] > 0 ? sums[0] / sums[2] : std::nan("");
  r.accuracy = classes && sums[2] > 0 ? sums[1] / sums[2] : std::nan("");
  return r;
}

FitResult Trainer::fit(nn::Module& model, const nn::LossFunction& loss_fn,
                       optim::Optimizer& optimizer, data::DataLoader& train_loader,
                       data::DataLoader* val_loader, optim::LRScheduler* scheduler) {
  const auto fit_start = Clock::now();
  const bool rank0 = comm_.rank() == 0;
  auto* ddp = dynamic_cast<dist::DistributedDataParallel*>(&model);
  nn::Module& bare = unwrap(model);
  FitResult result;

  // The settings that must not change while the run lives in its directory.
  io::RunConfig config = options_.run_config;
  for (auto& [key, value] : io::model_settings(bare, optimizer)) config[key] = value;
  config["monitor"] = options_.monitor;
  Progress progress(options_.progress, options_.log_every_steps, rank0);

  // Rank 0 checks the directory and chooses the checkpoint; nothing is written
  // before every rank knows that the run may start.
  StartPlan plan;
  decide_on_rank0(comm_, [&] { plan = plan_start(options_, config, bare, optimizer); });
  for (const std::string& m : plan.messages) progress.message(m);
  broadcast_string(comm_, plan.resume_path);

  std::unique_ptr<io::CheckpointDirectory> checkpoints;
  if (!options_.checkpoint_dir.empty()) {
    checkpoints = std::make_unique<io::CheckpointDirectory>(options_.checkpoint_dir,
                                                            options_.keep_last, config);
  }

  // ---- where to start ----------------------------------------------------------
  int64_t start_epoch = 0, start_batch = 0, global_step = 0, bad_epochs = 0;
  double best = std::nan("");
  auto apply = [&](const io::TrainingState& st, const std::string& from) {
    start_epoch = st.epoch;
    start_batch = st.batch_in_epoch;
    global_step = st.global_step;
    for (size_t d = 0; d < options_.devices.size() && d < st.rng.size(); ++d) {
      options_.devices[d].generator().set_state(st.rng[d].first, st.rng[d].second);
    }
    auto value = [&](const char* key, double fallback) {
      auto it = st.values.find(key);
      return it == st.values.end() ? fallback : it->second;
    };
    if (scheduler != nullptr && st.values.count("scheduler.last_epoch") != 0) {
      try {
        scheduler->load_state_dict({{"last_epoch", value("scheduler.last_epoch", 0)},
                                    {"base_lr", value("scheduler.base_lr", scheduler->base_lr())}});
      } catch (const ValueError& e) {
        throw IOError(fmt::format("{} (the scheduler state in '{}')", e.what(), from));
      }
    }
    best = value("best_metric", std::nan(""));
    const double bad = value("bad_epochs", 0);
    if (!detail::is_count(bad)) {
      throw IOError(
          fmt::format("kdp::train: training/bad_epochs = {} in '{}' is not a whole "
                      "number >= 0",
                      bad, from));
    }
    bad_epochs = static_cast<int64_t>(bad);
    result.resumed_from = from;
    if (st.world_size != comm_.size()) {
      progress.message(
          fmt::format("note: {} was written by {} ranks, this run has {}; the sample "
                      "order differs from an uninterrupted run",
                      from, st.world_size, comm_.size()));
    }
    progress.message(fmt::format("resumed from {} (epoch {}, batch {}, step {})", from,
                                 st.epoch + 1, st.batch_in_epoch, st.global_step));
  };
  if (!plan.resume_path.empty()) {
    // Every rank loads the checkpoint rank 0 chose; all stop if any cannot.
    std::string error;
    io::TrainingState st;
    try {
      st = plan.resumed
               ? io::load_checkpoint(std::move(*plan.resumed), plan.resume_path, bare, optimizer)
               : io::load_checkpoint(plan.resume_path, bare, optimizer);
    } catch (const Error& e) {
      error = e.what();
    }
    int64_t failed = error.empty() ? 0 : 1;
    comm_.allreduce(&failed, 1, dist::ReduceOp::Max);
    if (failed != 0) {
      throw IOError(error.empty() ? fmt::format("kdp::train: another rank could not load '{}'",
                                                plan.resume_path)
                                  : error);
    }
    plan.resumed.reset();
    apply(st, plan.resume_path);
  }

  MetricsLog metrics;
  if (rank0 && !options_.metrics_path.empty()) {
    metrics.open(options_.metrics_path, plan.metrics_file, plan.metrics_keep_bytes);
  }

  auto state_at = [&](int64_t epoch, int64_t batch) {
    io::TrainingState st;
    st.epoch = epoch;
    st.batch_in_epoch = batch;
    st.global_step = global_step;
    st.sampler_seed = options_.sampler_seed;
    st.world_size = comm_.size();
    st.devices_per_rank = static_cast<int64_t>(options_.devices.size());
    st.kdp_version = version_string;
    for (const Device& d : options_.devices) {
      st.rng.emplace_back(d.generator().seed(), d.generator().offset());
    }
    if (scheduler != nullptr) {
      st.values["scheduler.last_epoch"] = static_cast<double>(scheduler->last_epoch());
      st.values["scheduler.base_lr"] = scheduler->base_lr();
    }
    for (const auto& [key, v] : options_.record) st.values[key] = v;
    st.values["best_metric"] = best;
    st.values["bad_epochs"] = static_cast<double>(bad_epochs);
    return st;
  };
  // Rank 0 writes; every rank learns whether it could, so that a full disk
  // stops all of them with the same error instead of leaving some waiting.
  auto on_rank0 = [&](const std::function<void()>& write) {
    std::string error;
    if (rank0) {
      try {
        write();
      } catch (const Error& e) {
        error = e.what();
      }
    }
    broadcast_string(comm_, error);
    if (!error.empty()) {
      throw IOError(rank0 ? error : fmt::format("checkpoint not written by rank 0: {}", error));
    }
  };
  auto save = [&](int64_t epoch, int64_t batch) -> std::string {
    if (!checkpoints) return "";
    const std::string path = checkpoints->path_for(global_step);
    on_rank0([&] { checkpoints->save(bare, optimizer, state_at(epoch, batch)); });
    result.last_checkpoint = path;
    return path;
  };
  // A metrics file that cannot be written stops every rank, as a checkpoint
  // that cannot be written does: after saving one when it can (`save_at`).
  auto stop_if_metrics_failed = [&](std::optional<std::pair<int64_t, int64_t>> save_at) {
    int64_t failed = metrics.failed() ? 1 : 0;
    comm_.allreduce(&failed, 1, dist::ReduceOp::Max);
    if (failed == 0) return;
    std::string saved = checkpoints ? "" : "no checkpoint_dir, so no checkpoint";
    if (checkpoints && save_at) {
      try {
        saved = fmt::format("checkpoint {} written", save(save_at->first, save_at->second));
      } catch (const Error& e) {
        saved = fmt::format("no checkpoint either: {}", e.what());
      }
    } else if (checkpoints) {
      saved = fmt::format("last checkpoint {}", result.last_checkpoint);
    }
    std::string error = metrics.error();
    broadcast_string(comm_, error);
    throw IOError(fmt::format("{}{}; training stopped at step {} ({})",
                              rank0 ? "" : "rank 0 could not write its metrics: ", error,
                              global_step, saved));
  };

  StopSignal stop;
  // A driver that installed the handler first (to catch a signal during its
  // start-up) keeps what arrived since; a Trainer on its own starts afresh.
  if (stop.outermost()) StopSignal::clear();
  const int64_t accum = options_.accumulate_grad_batches;
  const int64_t batches = train_loader.num_batches();
  const bool classes = train_loader.dataset().num_classes() > 0;
  const bool check = options_.detect_anomaly;
  int64_t samples_total = 0;
  bool reached_max = options_.max_steps >= 0 && global_step >= options_.max_steps;

  for (int64_t epoch = start_epoch; epoch < options_.epochs && !reached_max; ++epoch) {
    train_loader.set_epoch(epoch);
    const int64_t first = epoch == start_epoch ? start_batch : 0;
    if (first > 0) train_loader.set_start_batch(first);
    model.train();
    progress.start_epoch(epoch, options_.epochs, batches);
    const auto epoch_start = Clock::now();
    const double wait_before = train_loader.wait_seconds();
    const double comm_before = ddp != nullptr ? ddp->comm_wait_seconds() : 0.0;
    // The epoch's sums stay on the device; the host reads them when a step is
    // checked or shown, and at the end of the epoch.
    EpochSums running(options_.devices.front());
    int64_t samples = 0;
    int64_t batch = first;
    Tensor step_loss;  // the micro-batch losses of this step, summed (non-finite if any is)

    for (data::Batch& b : train_loader) {
      const bool last_micro = (batch + 1) % accum == 0 || batch + 1 == batches;
      const auto n = b.features.size(0);
      {
        std::optional<dist::DistributedDataParallel::NoSyncGuard> no_sync;
        if (ddp != nullptr && !last_micro) no_sync.emplace(*ddp);
        const Tensor out = model.forward(b.features);
        const Tensor loss = loss_fn(out, b.labels);
        (accum > 1 ? loss / static_cast<float>(accum) : loss).backward();
        NoGradGuard no_grad;
        running.add(loss.detach(), static_cast<float>(n), classes ? out.detach() : Tensor(),
                    b.labels);
        if (check) step_loss = step_loss.defined() ? step_loss + loss.detach() : loss.detach();
      }
      samples += n;
      ++batch;
      if (!last_micro) continue;

      // What this step must read: the loss and the gradients' health (anomaly
      // checks), the running figures (progress, metrics). One copy holds all.
      const int64_t step_number = global_step + 1;
      const bool show = progress.shows(step_number, batch == batches);
      const bool log_row =
          metrics.active() && step_number % std::max<int64_t>(1, options_.log_every_steps) == 0;
      std::vector<Tensor> params;
      if (check || options_.gradient_clip_norm > 0.0) {
        for (const auto& [name, p] : optimizer.parameters()) params.push_back(p);
      }
      Tensor bad_values = check ? nn::non_finite_grad_count(params) : Tensor();
      Tensor norm;
      if (options_.gradient_clip_norm > 0.0) {
        norm = nn::clip_grad_norm(params, options_.gradient_clip_norm);
      }
      std::vector<float> probe;  // step loss, bad gradient values, loss sum, correct, norm
      if (check || show || log_row) {
        probe = read_scalars({step_loss, bad_values, running.loss_sum, running.correct, norm});
      }
      step_loss = Tensor();
      if (check && !std::isfinite(probe[0])) {
        throw NumericalError(fmt::format(
            "kdp::train: the loss is {} at step {} (epoch {}, batch {}) on rank {}; training "
            "stopped before the optimizer step, no checkpoint was written after it",
            probe[0], step_number, epoch + 1, batch - 1, comm_.rank()));
      }
      if (check && probe[1] > 0.0f) {
        throw NumericalError(fmt::format(
            "kdp::train: the gradient of '{}' holds NaN or Inf at step {} (epoch {}, batch {}) "
            "on rank {}; training stopped before the optimizer step",
            first_non_finite_grad(optimizer), step_number, epoch + 1, batch - 1, comm_.rank()));
      }
      optimizer.step();
      optimizer.zero_grad(/*set_to_none=*/ddp == nullptr);  // DDP keeps its bucket views
      ++global_step;
      if (scheduler != nullptr && options_.step_scheduler_per_batch) scheduler->step();

      if (show || log_row) {
        const double count = std::max<double>(1.0, static_cast<double>(samples));
        const double elapsed = seconds_since(epoch_start);
        const double rate =
            elapsed > 0 ? static_cast<double>(samples) * comm_.size() / elapsed : 0.0;
        const double loss_avg = probe[2] / count;
        const double acc_avg = classes ? probe[3] / count : std::nan("");
        if (show) progress.step(batch - 1, global_step, loss_avg, acc_avg, rate);
        if (log_row) {
          metrics.write("step",
                        {{"epoch", static_cast<double>(epoch + 1)},
                         {"step", static_cast<double>(global_step)},
                         {"loss", loss_avg},
                         {"accuracy", acc_avg},
                         {"lr", optimizer.lr()},
                         {"samples_per_s", rate},
                         {"data_wait_s", train_loader.wait_seconds() - wait_before},
                         {"comm_s", ddp != nullptr ? ddp->comm_wait_seconds() - comm_before : 0.0},
                         {"grad_norm", norm.defined() ? probe[4] : std::nan("")}});
        }
      }

      // Every rank stops after the same step when any of them got a signal,
      // or when rank 0 could not write its metrics (one collective for both).
      int64_t flags[2] = {StopSignal::requested() ? StopSignal::signal() : 0,
                          metrics.failed() ? 1 : 0};
      comm_.allreduce(flags, 2, dist::ReduceOp::Max);
      if (flags[1] != 0) stop_if_metrics_failed(std::make_pair(epoch, batch));
      const int64_t signal = flags[0];
      if (signal != 0) {
        save(epoch, batch);
        metrics.close();
        stop_if_metrics_failed(std::nullopt);
        result.stopped_by_signal = true;
        result.signal = static_cast<int>(signal);
        progress.end_epoch(fmt::format("stopped by signal {} at step {}; {}", signal, global_step,
                                       result.last_checkpoint.empty()
                                           ? std::string("no checkpoint (no checkpoint directory)")
                                           : "checkpoint " + result.last_checkpoint));
        result.global_step = global_step;
        result.wall_seconds = seconds_since(fit_start);
        return result;
      }
      if (options_.checkpoint_every_steps > 0 &&
          global_step % options_.checkpoint_every_steps == 0 && batch < batches) {
        save(epoch, batch);
      }
      if (options_.max_steps >= 0 && global_step >= options_.max_steps) {
        reached_max = true;
        break;
      }
    }
    samples_total += samples;

    if (reached_max && batch < batches) {  // stopped inside the epoch
      save(epoch, batch);
      break;
    }

    // ---- end of epoch ----------------------------------------------------------
    const std::vector<float> totals = read_scalars({running.loss_sum, running.correct});
    double sums[3] = {totals[0], totals[1], static_cast<double>(samples)};
    comm_.allreduce(sums, 3, dist::ReduceOp::Sum);
    EpochRecord rec;
    rec.epoch = epoch + 1;
    rec.seconds = seconds_since(epoch_start);
    rec.loss = sums[0] / std::max(1.0, sums[2]);
    rec.accuracy = classes ? sums[1] / std::max(1.0, sums[2]) : std::nan("");
    rec.samples_per_s = rec.seconds > 0 ? sums[2] / rec.seconds : 0.0;
    rec.val_loss = rec.val_accuracy = std::nan("");
    if (val_loader != nullptr) {
      const EvalResult v = evaluate(model, loss_fn, *val_loader);
      rec.val_loss = v.loss;
      rec.val_accuracy = v.accuracy;
    }
    if (scheduler != nullptr && !options_.step_scheduler_per_batch) scheduler->step();
    result.history.push_back(rec);
    result.epochs_completed = epoch + 1;

    const double monitored = options_.monitor == "val_loss"       ? rec.val_loss
                             : options_.monitor == "val_accuracy" ? rec.val_accuracy
                             : options_.monitor == "loss"         ? rec.loss
                                                                  : rec.accuracy;
    bool improved = false;
    if (std::isfinite(monitored)) {
      const double delta = options_.early_stopping_min_delta;
      improved = std::isnan(best) ||
                 (maximise(options_.monitor) ? monitored > best + delta : monitored < best - delta);
      if (improved) {
        best = monitored;
        bad_epochs = 0;
      } else {
        ++bad_epochs;
      }
    }
    if (checkpoints && options_.checkpoint_every_epoch) save(epoch + 1, 0);
    if (checkpoints && options_.keep_best && improved) {
      int64_t wrote = 0;
      on_rank0([&] {
        wrote = checkpoints->save_best(bare, optimizer, state_at(epoch + 1, 0),
                                       maximise(options_.monitor));
      });
      comm_.broadcast(&wrote, sizeof(wrote), 0);
      if (wrote != 0) result.best_checkpoint = checkpoints->best_path();
    }
    if (metrics.active()) {
      metrics.write("epoch",
                    {{"epoch", static_cast<double>(epoch + 1)},
                     {"step", static_cast<double>(global_step)},
                     {"loss", rec.loss},
                     {"accuracy", rec.accuracy},
                     {"lr", optimizer.lr()},
                     {"samples_per_s", rec.samples_per_s},
                     {"data_wait_s", train_loader.wait_seconds() - wait_before},
                     {"comm_s", ddp != nullptr ? ddp->comm_wait_seconds() - comm_before : 0.0},
                     {"val_loss", rec.val_loss},
                     {"val_accuracy", rec.val_accuracy}});
      metrics.sync();
    }
    stop_if_metrics_failed(std::nullopt);  // the epoch's checkpoint is written already
    std::string summary =
        fmt::format("epoch {}/{}: loss {:.4f}", epoch + 1, options_.epochs, rec.loss);
    if (classes) summary += fmt::format(" acc {:.4f}", rec.accuracy);
    if (val_loader != nullptr) {
      summary += fmt::format(" val_loss {:.4f}", rec.val_loss);
      if (!std::isnan(rec.val_accuracy))
        summary += fmt::format(" val_acc {:.4f}", rec.val_accuracy);
    }
    summary += fmt::format(" ({:.0f} samples/s, {:.1f} s)", rec.samples_per_s, rec.seconds);
    progress.end_epoch(summary);

    if (options_.early_stopping_patience > 0 && bad_epochs >= options_.early_stopping_patience) {
      result.early_stopped = true;
      progress.message(fmt::format("early stopping: {} did not improve for {} epochs",
                                   options_.monitor, bad_epochs));
      break;
    }
    const double goal = options_.stopping_threshold;
    if (std::isfinite(monitored) && !std::isnan(goal) &&
        (maximise(options_.monitor) ? monitored >= goal : monitored <= goal)) {
      result.early_stopped = true;
      progress.message(
          fmt::format("stopping: {} reached {} ({:.4f})", options_.monitor, goal, monitored));
      break;
    }
  }
  if (checkpoints && result.last_checkpoint.empty()) save(start_epoch, start_batch);
  metrics.close();
  stop_if_metrics_failed(std::nullopt);
  result.global_step = global_step;
  result.wall_seconds = seconds_since(fit_start);
  result.samples_per_s = result.wall_seconds > 0 ? static_cast<double>(samples_total) *
                                                       comm_.size() / result.wall_seconds
                                                 : 0.0;
  return result;
}

}  // namespace kdp::train
