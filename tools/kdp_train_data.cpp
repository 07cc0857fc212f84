// kdp-train's data: the training and validation samples of its options
// (data::open_splits), their normalisation, and the loss their targets take.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "kdp_train.hpp"

namespace kdp::train_tool {

namespace fs = std::filesystem;

namespace {

// Mean and standard deviation of the (scaled) features of up to 10000 samples.
std::pair<float, float> feature_moments(const data::Dataset& ds) {
  const int64_t n = std::min<int64_t>(ds.size(), 10000);
  const int64_t row = ds.sample_shape().numel();
  const int64_t lrow = std::max<int64_t>(1, ds.label_shape().numel());
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    idx[static_cast<size_t>(i)] = i * (ds.size() / std::max<int64_t>(1, n));
  std::vector<float> f(static_cast<size_t>(n * row)), l(static_cast<size_t>(n * lrow));
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

// The training and validation parts, each dataset opened with `h5`.
TrainingData open_parts(const Options& o, const data::HDF5DatasetOptions& h5) {
  data::SplitSpec spec;
  spec.file = o.data;
  spec.inputs = o.inputs;
  spec.targets = o.targets;
  spec.val_file = o.val_data;
  spec.val_fraction = o.val_fraction;
  spec.seed = o.seed;
  TrainingData d;
  static_cast<data::Splits&>(d) = data::open_splits(spec, h5);
  return d;
}

}  // namespace

TrainingData load_data(const Options& o, dist::Communicator& comm, SampleForm form) {
  // The default data is imported on first use.
  if (o.data == Options{}.data && !fs::exists(o.data)) {
    if (comm.rank() == 0) {
      fs::create_directories(fs::path(o.data).parent_path());
      std::printf("importing Fashion-MNIST into %s\n", o.data.c_str());
      data::import_fashion_mnist(o.data);
    }
    comm.barrier();
  }
  if (o.val_fraction > 0.0 && !o.val_data.empty()) {
    throw ValueError(fmt::format(
        "--val-fraction {} and --val-data '{}' both name the validation samples: give one",
        o.val_fraction, o.val_data));
  }
  if (o.val_fraction >= 1.0) {
    throw ValueError(fmt::format("--val-fraction {} leaves no training samples: it must be below 1",
                                 o.val_fraction));
  }
  data::HDF5DatasetOptions h5;
  h5.flatten = form == SampleForm::Flat;
  h5.as_images = form == SampleForm::Images;
  TrainingData d = open_parts(o, h5);
  if (d.tokens()) {  // ids, neither scaled nor normalised
    if (o.normalise == "channel" || o.standardise_targets) {
      throw ValueError(
          fmt::format("{} holds token ids, which are not normalised: drop --normalise channel and "
                      "--standardise-targets",
                      d.train_name));
    }
  } else if (o.normalise == "global") {  // one mean and deviation, applied as the samples are read
    std::tie(d.mean, d.stddev) = feature_moments(*d.train);
    h5.mean = d.mean;
    h5.stddev = d.stddev;
    const float mean = d.mean, stddev = d.stddev;
    d = open_parts(o, h5);
    d.mean = mean;
    d.stddev = stddev;
  } else if (o.normalise == "channel") {  // per channel, on the device
    d.features = data::channel_moments(*d.train, false);
  }
  if (o.standardise_targets) {
    if (!d.regression()) {
      throw ValueError(
          fmt::format("--standardise-targets: the targets of {} are class indices, not values to "
                      "standardise",
                      d.train_name));
    }
    d.targets = data::channel_moments(*d.train, true);
  }
  if (o.batch_size > d.train->size()) {
    throw ValueError(fmt::format("--batch-size {} is larger than the {} training samples of {}",
                                 o.batch_size, d.train->size(), d.train_name));
  }
  return d;
}

nn::LossFunction make_loss(const Options& o, const TrainingData& d) {
  const std::string loss = o.loss.empty() ? (d.regression() ? "mse" : "cross_entropy") : o.loss;
  if (d.tokens()) {
    if (loss != "cross_entropy") {
      throw ValueError(fmt::format(
          "--loss {}: the targets of {} are next tokens, learnt with --loss cross_entropy", loss,
          d.train_name));
    }
    // Logits [B, T, V] against the next tokens [B, T]: every position one
    // class (the mean over B x T, in nats per token).
    return [](const Tensor& out, const Tensor& y) {
      const int64_t positions = y.numel();
      return cross_entropy(out.reshape({positions, out.size(out.dim() - 1)}),
                           y.reshape({positions}));
    };
  }
  if (!d.regression()) {
    if (loss != "cross_entropy") {
      throw ValueError(
          fmt::format("--loss {} is a regression loss, but the targets of {} are class indices ({} "
                      "classes): use --loss cross_entropy, or store the targets as floats",
                      loss, d.train_name, d.train->num_classes()));
    }
    return [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); };
  }
  if (loss == "cross_entropy") {
    throw ValueError(
        fmt::format("--loss cross_entropy takes class indices, but the targets of {} are floats "
                    "{} (a regression): use --loss mse, l1, smooth_l1 or huber",
                    d.train_name, d.train->label_shape().str()));
  }
  // Targets [B] of one value each meet outputs [B, 1]: the same values.
  const auto fitted = [](const Tensor& out, const Tensor& y) {
    return y.shape() == out.shape() ? y : y.reshape(out.shape().to_vector());
  };
  if (loss == "l1") {
    return [fitted](const Tensor& out, const Tensor& y) { return l1_loss(out, fitted(out, y)); };
  }
  if (loss == "smooth_l1") {
    return [fitted](const Tensor& out, const Tensor& y) {
      return smooth_l1_loss(out, fitted(out, y));
    };
  }
  if (loss == "huber") {
    return [fitted](const Tensor& out, const Tensor& y) { return huber_loss(out, fitted(out, y)); };
  }
  return [fitted](const Tensor& out, const Tensor& y) { return mse_loss(out, fitted(out, y)); };
}

}  // namespace kdp::train_tool
