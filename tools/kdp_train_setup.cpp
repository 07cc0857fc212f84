// kdp-train's setup: the data (imported on first use, normalised), the model
// of --model, the optimizer and schedule, and what the Trainer is told.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
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

// The samples --model takes: flat for MLP sizes and a layer list that starts
// with linear, as stored (signals, volumes, sequences) for one that starts
// with a 1-d or 3-d layer or a transformer's, images otherwise.
SampleForm sample_form(const std::string& model) {
  if (!nn::is_layer_list(model)) return SampleForm::Flat;
  const std::string first = nn::parse_layer_list(model).front().kind;
  if (first == "linear") return SampleForm::Flat;
  if (first == "transformer" || first == "layernorm") return SampleForm::AsStored;
  const int dims = nn::window_dims(first);
  return dims == 1 || dims == 3 ? SampleForm::AsStored : SampleForm::Images;
}

// What the model's output must be for the targets: [classes], or a target's
// shape ([1] for one value per sample).
Shape output_for(const TrainingData& d) {
  if (!d.regression()) return Shape{d.train->num_classes()};
  const Shape target = d.train->label_shape();
  return target.rank() == 0 ? Shape{1} : target;
}

std::string what_it_has(const TrainingData& d) {
  if (!d.regression()) return fmt::format("{} classes", d.train->num_classes());
  return fmt::format("targets {} per sample", d.train->label_shape().str());
}

// gpt(...) learns token windows (text), and nothing else learns them.
void check_text_and_model(const Options& o, const TrainingData& d) {
  const bool gpt = nn::is_layer_list(o.model) && nn::parse_layer_list(o.model).size() == 1 &&
                   nn::parse_layer_list(o.model)[0].kind == "gpt";
  if (o.sample > 0 && !gpt) {
    throw ValueError(
        fmt::format("--sample {} generates text: it needs --model 'gpt(...)' on token "
                    "windows (kdp-data import-text)",
                    o.sample));
  }
  if (o.sample > 0) {  // a prompt outside the vocabulary, before any training
    static_cast<const data::TokenDataset&>(*d.val).encode(o.prompt);
  }
  if (gpt == d.tokens()) return;
  throw ValueError(gpt ? fmt::format("--model '{}' learns next tokens, but {} holds {} (token "
                                     "windows come from kdp-data import-text)",
                                     o.model, d.train_name, what_it_has(d))
                       : fmt::format("{} holds token windows (text): train them with --model "
                                     "'gpt(depth,heads,dim)'",
                                     d.train_name));
}

Model build_model(const Options& o, const TrainingData& d, const Device& device) {
  Model m;
  const Shape sample = d.train->sample_shape();
  const Shape want = output_for(d);
  check_text_and_model(o, d);
  if (nn::is_layer_list(o.model)) {
    const std::vector<nn::LayerSpec> layers = nn::parse_layer_list(o.model);
    if (layers.size() == 1 && nn::is_model_word(layers[0].kind)) {
      if (d.regression()) {
        throw ValueError(fmt::format("--model '{}' ends with a head to classes but {} has {}",
                                     o.model, d.train_name, what_it_has(d)));
      }
      manual_seed(o.seed);
      m.net = nn::build_model_word(layers[0], sample, d.train->num_classes(), device);
      m.recorded = nn::layer_list_text(layers);
      m.images = sample.rank() == 3;
      return m;
    }
    const Shape out = nn::layer_list_shapes(layers, sample).back();
    if (out != want) {
      throw ValueError(fmt::format("--model '{}' ends with samples of {} but {} has {}", o.model,
                                   out.str(), d.train_name, what_it_has(d)));
    }
    manual_seed(o.seed);
    m.net = nn::build_layer_list(layers, sample, device);
    m.recorded = nn::layer_list_text(layers);
    m.images = sample.rank() == 3;
  } else {
    const std::vector<int64_t> sizes = parse_sizes(o.model);
    if (sizes.front() != sample.numel()) {
      throw ValueError(
          fmt::format("--model starts with {} inputs but the samples of {} have {} features",
                      sizes.front(), d.train_name, sample.numel()));
    }
    if (want.rank() != 1 || sizes.back() != want.numel()) {
      throw ValueError(fmt::format(
          "--model ends with {} outputs but {} has {}{}", sizes.back(), d.train_name,
          what_it_has(d), want.rank() != 1 ? ": give a layer list that ends with them" : ""));
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

// Per-channel values as a run configuration records them: the list, or for
// many channels (each feature of a wide table) their count and an FNV-1a
// fingerprint of their bits, so that the setting stays one short attribute.
std::string recorded_values(const std::vector<float>& values) {
  if (values.size() <= 16) return fmt::format("{}", fmt::join(values, ","));
  uint64_t h = 1469598103934665603ull;
  for (float v : values) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    for (int k = 0; k < 4; ++k) h = (h ^ ((bits >> (8 * k)) & 0xffu)) * 1099511628211ull;
  }
  return fmt::format("{} channels, fnv1a64:{:016x}", values.size(), h);
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
  // Where the samples come from and what is minimised.
  const Options defaults;
  if (o.inputs != defaults.inputs) c["inputs"] = o.inputs;
  if (o.targets != defaults.targets) c["targets"] = o.targets;
  if (!o.val_data.empty()) c["val-data"] = o.val_data;
  if (o.val_fraction > 0.0) c["val-fraction"] = fmt::format("{}", o.val_fraction);
  if (d.regression()) c["loss"] = o.loss.empty() ? "mse" : o.loss;
  if (o.normalise != defaults.normalise) c["normalise"] = o.normalise;
  for (const auto& [key, n] : {std::pair{"data.channel", &d.features}, {"targets", &d.targets}}) {
    if (!n->active()) continue;
    c[fmt::format("{}-mean", key)] = recorded_values(n->mean);
    c[fmt::format("{}-std", key)] = recorded_values(n->stddev);
  }
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
  t.monitor = !o.monitor.empty() ? o.monitor : d.regression() ? "val_loss" : "val_accuracy";
  t.early_stopping_patience = o.patience;
  t.resume = o.resume == "never" ? "" : o.resume;
  t.metrics_path = o.metrics;
  t.trace_path = o.trace;
  t.log_every_steps = o.log_every;
  t.progress = o.progress == "bar" ? 1 : (o.progress == "lines" ? 0 : -1);
  t.detect_anomaly = !o.no_anomaly_check;
  t.precision = parse_precision(o.precision);
  t.require_locks = !o.without_locks;
  t.reproducible = o.reproducible;
  t.shards = o.shards;
  t.checkpoint_slices = o.checkpoint_writes == "slices";
  t.devices = devs;
  t.sampler_seed = o.seed;
  if (d.tokens()) {
    t.bytes_per_token = static_cast<const data::TokenDataset&>(*d.val).bytes_per_token();
  }
  t.record = {{"data.scale", d.source != nullptr ? d.source->normalisation().scale : 1.0f},
              {"data.mean", d.mean},
              {"data.std", d.stddev}};
  // Per channel, one list each: "data.channel_mean", ..., "targets.std".
  for (const auto& [key, n] : {std::pair{"data.channel_", &d.features}, {"targets.", &d.targets}}) {
    if (!n->active()) continue;
    t.record_series[fmt::format("{}mean", key)].assign(n->mean.begin(), n->mean.end());
    t.record_series[fmt::format("{}std", key)].assign(n->stddev.begin(), n->stddev.end());
  }
  if (o.stop_at_accuracy > 0.0) {
    if (d.regression()) {
      throw ValueError(
          fmt::format("--stop-at-accuracy {} needs classes, and the targets of {} are floats (a "
                      "regression): use --monitor val_loss with early stopping instead",
                      o.stop_at_accuracy, d.train_name));
    }
    t.stopping_threshold = o.stop_at_accuracy;
  }
  return t;
}

namespace {

// --reproducible, or --shards (the mode's own option).
bool reproducible_asked(const Options& o) {
  return o.reproducible_on || o.shards != Options{}.shards;
}

}  // namespace

std::string choose_modes(Options& o, dist::Communicator& comm, const Model& m,
                         const TrainingData& d, const Device& device) {
  train::ModeRequest ask;
  ask.reproducible = o.reproducible_off      ? train::ReproducibleMode::Off
                     : reproducible_asked(o) ? train::ReproducibleMode::On
                                             : train::ReproducibleMode::Auto;
  ask.precision = parse_precision(o.precision);
  ask.shards = o.shards;
  ask.devices_per_rank = o.devices;
  if (o.comm_hook_given) ask.comm_hook = o.comm_hook;
  ask.input_dims = 1 + d.train->sample_shape().rank();
  const train::ModeDecision modes = train::decide_modes(ask, *m.net, comm, device);
  o.reproducible = modes.reproducible;
  // The library's reason, with the option that changes it.
  switch (ask.reproducible) {
    case train::ReproducibleMode::Off:
      return "reproducible mode off (--no-reproducible)";
    case train::ReproducibleMode::On:
      return modes.reason;
    case train::ReproducibleMode::Auto:
      break;
  }
  return modes.reason + " (--reproducible asks for it)";  // Auto leaves the mode off
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
  if (reproducible_asked(o) && !o.reproducible_off && o.comm_hook_given) {
    throw ValueError(
        fmt::format("--comm-hook {} does not apply with --reproducible or --shards, whose exact "
                    "sums are its own reduction: leave --comm-hook out",
                    o.comm_hook));
  }
  if (o.reproducible_off && o.shards != Options{}.shards) {
    throw ValueError(fmt::format(
        "--shards {} applies in reproducible mode only (the virtual shards of its batches), "
        "which --no-reproducible turns off",
        o.shards));
  }
  // Each shard keeps a gradient of the whole model: shards without a sample
  // would cost that memory for nothing.
  if (o.shards != Options{}.shards && o.shards > o.batch_size) {
    throw ValueError(
        fmt::format("--shards {} exceeds the global batch of {} samples: use "
                    "--shards {} or fewer",
                    o.shards, o.batch_size, o.batch_size));
  }
}

}  // namespace kdp::train_tool
