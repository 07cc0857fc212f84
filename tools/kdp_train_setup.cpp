// kdp-train's setup: the data (imported on first use, normalised), the model
// of --model, the optimizer and schedule, and what the Trainer is told.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "kdp_train.hpp"

namespace kdp::train_tool {

namespace fs = std::filesystem;

// The errors thrown here are kdp-train's about its own options: each message
// starts with the option at fault (--model, --batch-size), not a function.

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
  if (d.train->num_classes() == 0) {
    throw ValueError(fmt::format(
        "--data '{}': /train/labels holds float targets {} (a regression); kdp-train trains "
        "classifiers with cross entropy: train a regression through kdp::train::Trainer with "
        "mse_loss, l1_loss, smooth_l1_loss or huber_loss",
        o.data, d.train->label_shape().str()));
  }
  std::tie(d.mean, d.stddev) = feature_moments(*d.train);
  h5.mean = d.mean;
  h5.stddev = d.stddev;
  d.train = std::make_shared<data::HDF5Dataset>(o.data, "train", h5);
  d.test = std::make_shared<data::HDF5Dataset>(o.data, "test", h5);
  check_splits(o, *d.train, *d.test);
  return d;
}

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
  t.reproducible = o.reproducible;
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
  // Reproducible mode sums gradients exactly itself: a hook (bf16 rounds,
  // hierarchical reorders) would not keep its guarantee.
  if (o.reproducible && o.comm_hook != Options{}.comm_hook) {
    throw ValueError(
        fmt::format("--comm-hook {} does not apply with --reproducible, whose exact "
                    "sums are its own reduction: leave --comm-hook out",
                    o.comm_hook));
  }
}

}  // namespace kdp::train_tool
