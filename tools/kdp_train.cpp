// kdp-train: trains an MLP or a CNN on an HDF5 dataset (Fashion-MNIST by
// default) across MPI ranks and device instances, with checkpoints, resume and
// metrics.
//
//   mpirun -np 2 kdp-train --epochs 10
//   srun kdp-train --checkpoint-dir runs/ckpt --resume auto
//
// Exit status: 0 done; 1 error (the message says what); 75 stopped by SIGTERM,
// SIGINT or SIGUSR1 after writing a checkpoint (requeue and --resume auto);
// 128 + the signal when a signal stopped it before any checkpoint was written.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "cli_checks.hpp"
#include "kdp/io/run_directory_error.hpp"
#include "kdp/kdp.hpp"

using namespace kdp;
namespace fs = std::filesystem;

namespace {

struct Options {
  std::string data = "data/fashion-mnist.h5";
  std::string model = "784,256,256,10";
  std::string activation = "relu";
  int64_t epochs = 10;
  int64_t batch_size = 128;
  std::string optimizer = "adam";
  double lr = 1e-3;
  double momentum = 0.9;
  double weight_decay = 0.0;
  int devices = 1;
  uint64_t seed = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep_last = 3;
  std::string resume = "never";
  bool overwrite = false;
  std::string metrics;
  int64_t max_steps = -1;
  int threads = 0;
  std::string scheduler = "none";
  double grad_clip = 0.0;
  int64_t accumulate = 1;
  bool no_anomaly_check = false;
  std::string progress = "auto";
  int64_t log_every = 50;
  bool without_locks = false;
  std::string status_file;
  double gamma = 0.1;
  int64_t step_size = 0;  // 0: epochs / 3
  std::vector<int64_t> milestones;
  bool sync_batchnorm = false;
  double stop_at_accuracy = 0.0;  // 0: train every epoch
  std::string trace;
  std::string comm_hook = "allreduce";
  std::string precision = "fp32";
  double bucket_mb = dist::DDPOptions{}.bucket_cap_mb;
};

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> sizes;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument(item);
      sizes.push_back(v);
    } catch (const std::exception&) {
      throw ValueError(fmt::format("--model '{}': '{}' is not a positive layer size", text, item));
    }
  }
  if (sizes.size() < 2) {
    throw ValueError(fmt::format("--model '{}' needs at least an input and an output size", text));
  }
  return sizes;
}

// The two splits train and evaluate one model: both must hold samples, and
// the same kind of them (type, scale, shape).
void check_splits(const Options& o, const data::HDF5Dataset& train, const data::HDF5Dataset& test) {
  for (const data::HDF5Dataset* split : {&train, &test}) {
    if (split->size() == 0) {
      throw ValueError(
          fmt::format("the {} split of '{}' holds no samples; kdp-train needs samples "
                      "to {}",
                      split == &train ? "train" : "test", o.data,
                      split == &train ? "train on" : "evaluate on"));
    }
  }
  if (train.feature_type() != test.feature_type() || train.sample_shape() != test.sample_shape()) {
    throw ValueError(fmt::format(
        "the splits of '{}' hold different kinds of samples: /train/images is {} {} but "
        "/test/images is {} {}; they would be scaled and normalised differently",
        o.data, train.feature_type(), train.sample_shape().str(), test.feature_type(),
        test.sample_shape().str()));
  }
  if (o.batch_size > train.size()) {
    throw ValueError(fmt::format("--batch-size {} is larger than the {} training samples of '{}'",
                                 o.batch_size, train.size(), o.data));
  }
}

// Mean and standard deviation of the (scaled) features of up to 10000 samples.
std::pair<float, float> feature_moments(const data::Dataset& ds) {
  const int64_t n = std::min<int64_t>(ds.size(), 10000);
  const int64_t row = ds.sample_shape().numel();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    idx[static_cast<size_t>(i)] = i * (ds.size() / std::max<int64_t>(1, n));
  std::vector<float> f(static_cast<size_t>(n * row)), l(static_cast<size_t>(n));
  ds.fetch(idx, f.data(), l.data());
  double s = 0, s2 = 0;
  for (float v : f) {
    s += v;
    s2 += static_cast<double>(v) * v;
  }
  const double mean = s / static_cast<double>(f.size());
  const double var = s2 / static_cast<double>(f.size()) - mean * mean;
  if (!std::isfinite(mean) || !std::isfinite(var)) {
    throw NumericalError(fmt::format(
        "the features of the training samples have no finite mean and variance (mean {}, "
        "variance {}); kdp-train cannot normalise them",
        mean, var));
  }
  return {static_cast<float>(mean), static_cast<float>(std::sqrt(std::max(var, 1e-12)))};
}

// The training and test splits, normalised by the training features' mean
// and standard deviation; flat samples or images, as the model's first layer
// takes them.
struct TrainingData {
  std::shared_ptr<data::HDF5Dataset> train, test;
  float mean = 0.0f, stddev = 1.0f;
};

TrainingData load_data(const Options& o, dist::Communicator& comm, bool images) {
  // The default data is imported on first use.
  if (o.data == Options{}.data && !fs::exists(o.data)) {
    if (comm.rank() == 0) {
      fs::create_directories(fs::path(o.data).parent_path());
      std::printf("importing Fashion-MNIST into %s\n", o.data.c_str());
      data::import_fashion_mnist(o.data);
    }
    comm.barrier();
  }
  data::HDF5DatasetOptions h5;
  h5.flatten = !images;
  h5.as_images = images;
  TrainingData d;
  d.train = std::make_shared<data::HDF5Dataset>(o.data, "train", h5);
  std::tie(d.mean, d.stddev) = feature_moments(*d.train);
  h5.mean = d.mean;
  h5.stddev = d.stddev;
  d.train = std::make_shared<data::HDF5Dataset>(o.data, "train", h5);
  d.test = std::make_shared<data::HDF5Dataset>(o.data, "test", h5);
  check_splits(o, *d.train, *d.test);
  return d;
}

// The model of --model: a layer list ("conv(32,3),relu,...") or MLP sizes
// ("784,256,10"), checked against the data's samples and classes, and how the
// run configuration records it.
struct Model {
  std::shared_ptr<nn::Module> net;
  std::string recorded;
  bool images = false;  // whether it takes images (else flat samples)
};

// Whether --model needs images: a layer list that does not start with linear.
bool takes_images(const std::string& model) {
  if (!nn::is_layer_list(model)) return false;
  return nn::parse_layer_list(model).front().kind != "linear";
}

Model build_model(const Options& o, const TrainingData& d, const Device& device) {
  Model m;
  const Shape sample = d.train->sample_shape();
  const int64_t classes = d.train->num_classes();
  if (nn::is_layer_list(o.model)) {
    const std::vector<nn::LayerSpec> layers = nn::parse_layer_list(o.model);
    const Shape out = nn::layer_list_shapes(layers, sample).back();
    if (out != Shape{classes}) {
      throw ValueError(fmt::format("--model '{}' ends with samples of {} but '{}' has {} classes",
                                   o.model, out.str(), o.data, classes));
    }
    manual_seed(o.seed);
    m.net = nn::build_layer_list(layers, sample, device);
    m.recorded = nn::layer_list_text(layers);
    m.images = sample.rank() == 3;
  } else {
    const std::vector<int64_t> sizes = parse_sizes(o.model);
    if (sizes.front() != sample.numel()) {
      throw ValueError(
          fmt::format("--model starts with {} inputs but the samples of '{}' have {} features",
                      sizes.front(), o.data, sample.numel()));
    }
    if (sizes.back() != classes) {
      throw ValueError(fmt::format("--model ends with {} outputs but '{}' has {} classes",
                                   sizes.back(), o.data, classes));
    }
    manual_seed(o.seed);
    m.net = nn::mlp(sizes, o.activation, device);
    m.recorded = fmt::format("{}", fmt::join(sizes, ","));
  }
  return m;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Options& o,
                                                 const optim::NamedParameters& params) {
  if (o.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{o.lr, o.momentum, 0.0, o.weight_decay, false});
  }
  if (o.optimizer == "adadelta") {
    optim::AdadeltaOptions a;
    a.lr = o.lr;
    a.weight_decay = o.weight_decay;
    return std::make_unique<optim::Adadelta>(params, a);
  }
  optim::AdamOptions a;
  a.lr = o.lr;
  a.weight_decay = o.weight_decay;
  if (o.optimizer == "adamw") return std::make_unique<optim::AdamW>(params, a);
  return std::make_unique<optim::Adam>(params, a);
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const Options& o, optim::Optimizer& opt) {
  if (o.scheduler == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, o.epochs);
  if (o.scheduler == "step") {
    const int64_t step = o.step_size > 0 ? o.step_size : std::max<int64_t>(1, o.epochs / 3);
    return std::make_unique<optim::StepLR>(opt, step, o.gamma);
  }
  if (o.scheduler == "multistep") {
    return std::make_unique<optim::MultiStepLR>(opt, o.milestones, o.gamma);
  }
  return nullptr;
}

// What makes this run this run; docs/reliability.md lists what may change on
// resume. Settings added since configurations were first recorded appear only
// when they differ from their defaults, so older directories still resume.
io::RunConfig run_config(const Options& o, const Model& m, const TrainingData& d) {
  std::error_code ec;
  const fs::path data_path = fs::weakly_canonical(fs::absolute(o.data), ec);
  io::RunConfig c = {{"model", m.recorded},
                     {"lr", fmt::format("{}", o.lr)},
                     {"weight-decay", fmt::format("{}", o.weight_decay)},
                     {"scheduler", o.scheduler},
                     {"grad-clip", fmt::format("{}", o.grad_clip)},
                     {"accumulate", fmt::format("{}", o.accumulate)},
                     {"batch-size", fmt::format("{}", o.batch_size)},
                     {"seed", fmt::format("{}", o.seed)},
                     {"data", ec ? o.data : data_path.string()},
                     {"data.mean", fmt::format("{}", d.mean)},
                     {"data.std", fmt::format("{}", d.stddev)}};
  if (!nn::is_layer_list(o.model)) c["activation"] = o.activation;
  if (o.optimizer == "sgd") c["momentum"] = fmt::format("{}", o.momentum);
  if (o.scheduler == "step" || o.scheduler == "multistep") {
    if (o.gamma != Options{}.gamma) c["gamma"] = fmt::format("{}", o.gamma);
    if (o.step_size > 0) c["step-size"] = fmt::format("{}", o.step_size);
    if (!o.milestones.empty()) c["milestones"] = fmt::format("{}", fmt::join(o.milestones, ","));
  }
  if (o.sync_batchnorm) c["sync-batchnorm"] = "yes";
  return c;
}

train::TrainerOptions trainer_options(const Options& o, const Model& m, const TrainingData& d,
                                      const std::vector<Device>& devs) {
  train::TrainerOptions t;
  t.run_config = run_config(o, m, d);
  t.overwrite = o.overwrite;
  t.epochs = o.epochs;
  t.max_steps = o.max_steps;
  t.accumulate_grad_batches = o.accumulate;
  t.gradient_clip_norm = o.grad_clip;
  t.checkpoint_dir = o.checkpoint_dir;
  t.checkpoint_every_steps = o.checkpoint_every;
  t.keep_last = o.keep_last;
  t.monitor = "val_accuracy";
  t.resume = o.resume == "never" ? "" : o.resume;
  t.metrics_path = o.metrics;
  t.trace_path = o.trace;
  t.log_every_steps = o.log_every;
  t.progress = o.progress == "bar" ? 1 : (o.progress == "lines" ? 0 : -1);
  t.detect_anomaly = !o.no_anomaly_check;
  t.precision = parse_precision(o.precision);
  t.require_locks = !o.without_locks;
  t.devices = devs;
  t.sampler_seed = o.seed;
  t.record = {{"data.scale", 1.0 / 255.0}, {"data.mean", d.mean}, {"data.std", d.stddev}};
  if (o.stop_at_accuracy > 0.0) t.stopping_threshold = o.stop_at_accuracy;
  return t;
}

void check_batch(const Options& o, int ranks) {
  if (o.devices < 1) throw ValueError(fmt::format("--devices {} must be at least 1", o.devices));
  if (o.batch_size < static_cast<int64_t>(ranks) * o.devices) {
    throw ValueError(
        fmt::format("--batch-size {} is smaller than ranks x devices = {} x {}; every "
                    "device needs at least one sample",
                    o.batch_size, ranks, o.devices));
  }
  if (o.batch_size % ranks != 0) {
    throw ValueError(fmt::format("--batch-size {} (global) does not divide evenly among {} ranks",
                                 o.batch_size, ranks));
  }
}

// A signal during the start-up (loading data, building the model) ends the run
// on every rank before it writes anything: the signal, or 0 for none.
int signal_before_training(dist::Communicator& comm) {
  int64_t early = StopSignal::requested() ? StopSignal::signal() : 0;
  comm.allreduce(&early, 1, dist::ReduceOp::Max);
  if (early != 0 && comm.rank() == 0) {
    std::printf("kdp-train: stopped by signal %lld before training started; nothing was written\n",
                static_cast<long long>(early));
  }
  return static_cast<int>(early);
}

// The exit status of a fit that a signal stopped: 75 asks the batch script to
// requeue, which helps only when there is a checkpoint to resume from.
int stopped_by_signal(const train::FitResult& r, bool rank0) {
  if (r.last_checkpoint.empty()) {
    if (rank0) {
      std::printf(
          "kdp-train: stopped by signal %d at step %lld; no checkpoint was written (there is "
          "no --checkpoint-dir), so nothing can be resumed; exit %d\n",
          r.signal, static_cast<long long>(r.global_step), 128 + r.signal);
    }
    return 128 + r.signal;
  }
  if (rank0) {
    std::printf(
        "kdp-train: stopped by signal %d at step %lld; checkpoint %s; exit %d (requeue "
        "and run again with --resume auto)\n",
        r.signal, static_cast<long long>(r.global_step), r.last_checkpoint.c_str(),
        train::kExitRequeue);
  }
  return train::kExitRequeue;
}

// The model as the run trains it: DataParallel over the rank's devices, DDP
// over the ranks.
std::shared_ptr<nn::Module> parallel_model(const Options& o, std::shared_ptr<nn::Module> net,
                                           const std::vector<Device>& devs,
                                           dist::Communicator& comm) {
  if (o.devices > 1) net = std::make_shared<DataParallel>(net, devs);
  if (comm.size() == 1) return net;
  return std::make_shared<dist::DistributedDataParallel>(
      net, comm,
      dist::DDPOptions{}
          .with_comm_hook(dist::comm_hook_named(o.comm_hook))
          .with_bucket_cap_mb(o.bucket_mb));
}

// Every rank's reduction bytes, summed: what the network and shared memory
// carried (rank 0 prints them).
void report_traffic(const Options& o, dist::Communicator& comm) {
  const dist::Traffic mine = comm.traffic();
  double bytes[2] = {static_cast<double>(mine.between_nodes),
                     static_cast<double>(mine.within_node)};
  comm.allreduce(bytes, 2, dist::ReduceOp::Sum);
  if (comm.rank() != 0 || comm.size() == 1) return;
  std::printf(
      "communication: %.3f MB over the network, %.3f MB in shared memory (%d node(s), hook "
      "%s)\n",
      bytes[0] * 1e-6, bytes[1] * 1e-6, comm.nodes(), o.comm_hook.c_str());
}

// The precision a run computes in, and why where --precision auto chose it.
std::string precision_line(const train::Trainer& trainer) {
  const std::string ran = precision_name(trainer.precision());
  if (trainer.options().precision != Precision::Auto) return ran;
  return ran + (trainer.precision() == Precision::bf16
                    ? " (auto: the device has bf16 matrix units)"
                    : " (auto: the device has no bf16 matrix units)");
}

int run(const Options& o, Runtime& runtime, dist::Communicator& comm) {
  const bool rank0 = comm.rank() == 0;
  const int ranks = comm.size();
  check_batch(o, ranks);
  const TrainingData d = load_data(o, comm, takes_images(o.model));

  const std::vector<Device> devs = devices(o.devices);
  const Model m = build_model(o, d, devs[0]);
  if (o.sync_batchnorm) nn::convert_sync_batchnorm(m.net);
  const std::shared_ptr<nn::Module> model = parallel_model(o, m.net, devs, comm);
  const auto optimizer = make_optimizer(o, m.net->named_parameters());
  const auto scheduler = make_scheduler(o, *optimizer);

  data::DistributedSamplerOptions train_sampling;
  train_sampling.seed = o.seed;
  data::DistributedSamplerOptions test_sampling;
  test_sampling.shuffle = false;
  test_sampling.exact = true;  // every test sample counted once
  data::DataLoaderOptions lo;
  lo.batch_size = o.batch_size / ranks;
  lo.device = devs[0];
  data::DataLoader train_loader(d.train,
                                std::make_shared<data::DistributedSampler>(
                                    d.train->size(), ranks, comm.rank(), train_sampling),
                                lo);
  lo.batch_size = std::max<int64_t>(lo.batch_size, 256);
  data::DataLoader test_loader(
      d.test,
      std::make_shared<data::DistributedSampler>(d.test->size(), ranks, comm.rank(), test_sampling),
      lo);

  train::Trainer trainer(trainer_options(o, m, d, devs), comm);
  if (rank0) {
    std::printf(
        "kdp-train: %d rank(s) x %d device(s), %d thread(s) per rank, model %s (%lld "
        "parameters), %s lr %g, global batch %lld, precision %s\n",
        ranks, o.devices, runtime.threads(), m.recorded.c_str(),
        static_cast<long long>(m.net->num_parameters()), o.optimizer.c_str(), o.lr,
        static_cast<long long>(o.batch_size), precision_line(trainer).c_str());
    std::fflush(stdout);
  }
  if (const int signal = signal_before_training(comm); signal != 0) return 128 + signal;
  nn::CrossEntropyLoss ce;
  const train::FitResult r =
      trainer.fit(*model, std::ref(ce), *optimizer, train_loader, &test_loader, scheduler.get());
  if (r.stopped_by_signal) return stopped_by_signal(r, rank0);
  // The test split is the validation split: the last epoch's evaluation is the
  // final one unless steps were taken after it (a step limit inside an epoch).
  train::EvalResult test;
  if (!r.history.empty() && r.history.back().step == r.global_step &&
      !std::isnan(r.history.back().val_loss)) {
    test.loss = r.history.back().val_loss;
    test.accuracy = r.history.back().val_accuracy;
  } else {
    test = trainer.evaluate(*model, std::ref(ce), test_loader);
  }
  report_traffic(o, comm);
  if (rank0) {
    std::printf(
        "kdp-train: test_accuracy=%.4f test_loss=%.4f samples_per_s=%.0f wall_time_s=%.1f "
        "epochs=%lld steps=%lld ranks=%d devices_per_rank=%d precision=%s\n",
        test.accuracy, test.loss, r.samples_per_s, r.wall_seconds,
        static_cast<long long>(r.epochs_completed), static_cast<long long>(r.global_step), ranks,
        o.devices, precision_name(r.precision));
    if (!r.last_checkpoint.empty()) std::printf("checkpoint: %s\n", r.last_checkpoint.c_str());
    if (!r.best_checkpoint.empty()) std::printf("best checkpoint: %s\n", r.best_checkpoint.c_str());
    if (!o.metrics.empty()) std::printf("metrics: %s\n", o.metrics.c_str());
  }
  return 0;
}

// What a person can do about a run that may not start, in kdp-train's options.
std::string way_out(io::RunDirectoryError::Reason reason) {
  using Reason = io::RunDirectoryError::Reason;
  const char* discard = "--resume never --overwrite to discard its checkpoints";
  switch (reason) {
    case Reason::OtherConfiguration:
      return fmt::format("Use another --checkpoint-dir, or {}.", discard);
    case Reason::CheckpointOfOtherConfiguration:
      return "Run with the settings it records to resume it, or leave out --resume to start "
             "afresh.";
    case Reason::HoldsThisRun:
      return fmt::format(
          "Add --resume auto to continue that run, use another --checkpoint-dir, or {}.", discard);
    case Reason::NothingToResume:
      return fmt::format(
          "Move them away (they were left as they are), use another --checkpoint-dir, or {}.",
          discard);
    case Reason::WouldFork:
      return "Use --resume auto to continue from the newest, or another --checkpoint-dir for "
             "the resumed run.";
    case Reason::MetricsFileExists:
      return "Use another --metrics file, --resume auto to continue the run that wrote it, or "
             "--resume never --overwrite to replace it.";
    case Reason::InUse:
      return "Wait for that run to end, or use another --checkpoint-dir and --metrics file.";
    case Reason::CannotLock:
      return "Use a file system with locks (Lustre mounted with -o flock, NFS with a lock "
             "manager), or pass --without-locks if you make sure that one run at a time uses "
             "these files.";
    case Reason::NotKdpFile:
      return "kdp leaves it as it is: move it away, or use another path.";
  }
  return "";
}

// A run that fails because a signal arrived ends with the signal's status.
int failed(const std::string& message, int rank) {
  if (StopSignal::requested()) {
    if (rank == 0) {
      std::fprintf(stderr, "kdp-train: stopped by signal %d: %s\n", StopSignal::signal(),
                   message.c_str());
    }
    return 128 + StopSignal::signal();
  }
  std::fprintf(stderr, "kdp-train: error on rank %d: %s\n", rank, message.c_str());
  return 1;
}

// Rank 0's exit status in --status-file, for batch scripts whose launcher
// reports a status of its own (mpirun after forwarding a signal).
void record_status(const std::string& path, int status) {
  if (path.empty()) return;
  try {
    io::write_file_atomically(path, fmt::format("{}\n", status));
  } catch (const Error& e) {
    std::fprintf(stderr, "kdp-train: %s\n", e.what());
  }
}

// Rank 0 applies kdp's rule for output files to --status-file before the run
// starts: every rank stops when it refuses. Returns the path the status may be
// written to (empty for none).
std::string claim_status_file(const Options& o, dist::Communicator& comm) {
  if (o.status_file.empty()) return "";
  int64_t refused = 0;
  if (comm.rank() == 0) {
    try {
      io::claim_output(o.status_file, io::OutputKind::status(), o.overwrite, "");
    } catch (const Error& e) {
      std::fprintf(stderr, "kdp-train: error: --status-file: %s\n", e.message().c_str());
      refused = 1;
    }
  }
  comm.allreduce(&refused, 1, dist::ReduceOp::Max);
  return refused != 0 ? "" : o.status_file;
}

// Runs kdp-train as `o` says; rank 0's status goes to --status-file (once it
// has been claimed) before MPI finalizes (a launcher that is tearing the job
// down may never let it return).
int main_with_options(Options& o, int argc, char** argv) {
  int rank = 0;
  int status = 1;
  std::string status_path;
  try {
    RuntimeOptions ro;
    ro.threads = o.threads;
    ro.seed = o.seed;
    Runtime runtime(argc, argv, ro);
    rank = runtime.world_rank();
    dist::Communicator world = dist::Communicator::world();
    status_path = claim_status_file(o, world);
    if (!o.status_file.empty() && status_path.empty()) return 1;
    try {
      status = run(o, runtime, world);
    } catch (const io::RunDirectoryError& e) {
      // Every rank has the same error: one message is enough.
      if (rank == 0) {
        std::fprintf(stderr, "kdp-train: error: %s\n%s%s\n", e.summary().c_str(),
                     e.details().c_str(), way_out(e.reason()).c_str());
      }
      status = 1;
    } catch (const Error& e) {
      status = failed(e.what(), rank);
    }
    if (rank == 0) record_status(status_path, status);
    return status;
  } catch (const std::exception& e) {
    status = failed(e.what(), rank);
  }
  if (rank == 0) record_status(status_path, status);
  return status;
}

// What is trained and how: data, model, optimizer and schedule, devices, seed.
void add_training_options(CLI::App& app, Options& o) {
  app.add_option(
      "--data", o.data,
      "HDF5 dataset with /train and /test (default: Fashion-MNIST, imported on first use)");
  app.add_option("--model", o.model,
                 "MLP layer sizes, input first, classes last (784,256,10), or a layer list: "
                 "conv(out,k[,stride[,padding]]), batchnorm, relu (and the other activations), "
                 "maxpool(k), avgpool(k), gap, dropout(p), dropout2d(p), flatten, linear(out), "
                 "e.g. 'conv(32,3),relu,maxpool(2),flatten,linear(10)'");
  app.add_option("--activation", o.activation, "Activation between layers")
      ->check(CLI::IsMember({"relu", "leaky_relu", "tanh", "sigmoid", "gelu"}));
  app.add_option("--epochs", o.epochs, "Epochs to train")->check(cli::whole_number(1));
  app.add_option("--batch-size", o.batch_size, "Global batch size (split evenly among ranks)")
      ->check(cli::whole_number(1));
  app.add_option("--optimizer", o.optimizer, "Optimizer")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "adadelta"}));
  app.add_option("--lr", o.lr, "Learning rate")->check(cli::real_number(0.0, false));
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(cli::real_number(0.0, true));
  app.add_option("--weight-decay", o.weight_decay, "Weight decay (decoupled for adamw)")
      ->check(cli::real_number(0.0, true));
  app.add_option("--scheduler", o.scheduler, "Learning-rate schedule over the epochs")
      ->check(CLI::IsMember({"none", "cosine", "step", "multistep"}));
  app.add_option("--gamma", o.gamma, "The lr factor of --scheduler step and multistep")
      ->check(cli::real_number(0.0, false));
  app.add_option("--step-size", o.step_size,
                 "Epochs between the lr steps of --scheduler step (default: epochs / 3)")
      ->check(cli::whole_number(1));
  app.add_option("--milestones", o.milestones,
                 "The epochs where --scheduler multistep multiplies the lr by --gamma, e.g. 5,8")
      ->delimiter(',')
      ->check(cli::whole_number(1));
  app.add_option("--stop-at-accuracy", o.stop_at_accuracy,
                 "Stop after the epoch whose test accuracy reaches this (0: train every epoch)")
      ->check(cli::real_number(0.0, true));
  app.add_flag("--sync-batchnorm", o.sync_batchnorm,
               "Normalise with the statistics of the whole batch across devices and ranks "
               "(SyncBatchNorm)");
  app.add_option("--devices", o.devices,
                 "Device instances per rank (DataParallel inside each rank)")
      ->check(cli::whole_number(1, 1 << 16));
  app.add_option("--precision", o.precision,
                 "Products and convolutions in fp32, in bf16 with fp32 accumulation (weights, "
                 "optimizer and checkpoints stay fp32), or auto (bf16 where the CPU has AMX or "
                 "the GPU tensor cores)")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
  app.add_option("--seed", o.seed, "Seed of initialisation, shuffling and dropout")
      ->check(cli::unsigned_number());
}

// Where the run's files go and how it starts: checkpoints, resume, metrics.
void add_file_options(CLI::App& app, Options& o) {
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Directory for checkpoints (none when empty); it belongs to one run "
                 "configuration");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "Also checkpoint every N optimizer steps (0: epochs only)")
      ->check(cli::whole_number(0));
  app.add_option("--keep-last", o.keep_last, "Checkpoints of this run to keep")
      ->check(cli::whole_number(1, 1 << 30));
  app.add_option("--resume", o.resume,
                 "'never' (the default: a fresh start), 'auto' (the newest checkpoint in "
                 "--checkpoint-dir that loads; unusable newer ones go to its rejected/) or a "
                 "checkpoint file");
  app.add_flag("--overwrite", o.overwrite,
               "With --resume never: discard the checkpoints in --checkpoint-dir and replace "
               "the --metrics, --trace and --status-file files, where they are kdp's");
  app.add_option("--metrics", o.metrics, "Metrics file (.csv, or JSON lines otherwise)");
}

// Across ranks: the gradient exchange and the timeline.
void add_distributed_options(CLI::App& app, Options& o) {
  app.add_option("--trace", o.trace,
                 "Chrome-trace JSON of every rank's step phases, written by rank 0 at the end "
                 "(chrome://tracing or Perfetto); names the slowest rank");
  app.add_option("--comm-hook", o.comm_hook,
                 "How gradient buckets are reduced across ranks: allreduce (float32), bf16 "
                 "(half the bytes, error feedback), hierarchical (inside each node first), "
                 "hierarchical-bf16")
      ->check(CLI::IsMember({"allreduce", "bf16", "hierarchical", "hierarchical-bf16"}));
  app.add_option("--bucket-mb", o.bucket_mb,
                 "Gradient bucket size in MB for the reductions (0: 25 on one node, 4 across "
                 "nodes)")
      ->check(cli::real_number(0.0, true));
}

// Limits, threads, checks and what the run shows.
void add_run_options(CLI::App& app, Options& o) {
  app.add_option("--max-steps", o.max_steps, "Stop after this many optimizer steps (-1: no limit)")
      ->check(cli::whole_number(-1, std::numeric_limits<int64_t>::max(),
                                "-1 (no limit) or a number of steps"));
  app.add_option("--threads", o.threads,
                 "BLAS/host threads per rank (0: cores / ranks on the node)")
      ->check(cli::whole_number(0, 1 << 16));
  app.add_option("--grad-clip", o.grad_clip, "Clip the gradient norm to this (0: off)")
      ->check(cli::real_number(0.0, true));
  app.add_option("--accumulate", o.accumulate, "Micro-batches per optimizer step")
      ->check(cli::whole_number(1));
  app.add_flag("--no-anomaly-check", o.no_anomaly_check,
               "Do not check loss and gradients for NaN/Inf");
  app.add_option("--progress", o.progress, "Progress display")
      ->check(CLI::IsMember({"auto", "bar", "lines"}));
  app.add_option("--log-every", o.log_every, "Log a line (and a metrics row) every N steps")
      ->check(cli::whole_number(1));
  app.add_flag("--without-locks", o.without_locks,
               "Run where the file system has no working locks (Lustre without flock, NFS "
               "without a lock manager); you make sure that one run at a time uses "
               "--checkpoint-dir and --metrics");
  app.add_option("--status-file", o.status_file,
                 "Rank 0 writes its exit status here as it ends (for batch scripts whose "
                 "launcher reports one of its own)");
}

}  // namespace

int main(int argc, char** argv) {
  // First of all: SIGTERM, SIGINT or SIGUSR1 from now on are noted, not fatal,
  // so a job stopped during start-up still ends with a message.
  StopSignal stop_signal;
  // A launcher that forwards a signal (mpirun) may stop relaying output at
  // once: a write to that pipe must fail, not kill the rank before its checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  Options o;
  CLI::App app{"kdp-train: data-parallel training of an MLP on an HDF5 dataset"};
  cli::use_plain_messages(app, "kdp-train");
  app.allow_extras();  // checked below: only --kokkos-* arguments (Kokkos') may be left
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_training_options(app, o);
  add_file_options(app, o);
  add_distributed_options(app, o);
  add_run_options(app, o);
  if (const int status = cli::parse(app, argc, argv); status >= 0) return status;
  if (const int status = cli::reject_unknown(app, app.remaining(), "kdp-train", {"--kokkos-"});
      status >= 0) {
    return status;
  }
  if ((o.scheduler == "multistep") != !o.milestones.empty()) {
    std::fprintf(stderr, "kdp-train: --milestones and --scheduler multistep go together\n");
    return 1;
  }
  if (o.overwrite && o.resume != "never") {
    std::fprintf(stderr,
                 "kdp-train: --overwrite discards what --checkpoint-dir holds; it goes with "
                 "--resume never, not --resume %s\n",
                 o.resume.c_str());
    return 1;
  }
  return main_with_options(o, argc, argv);
}
