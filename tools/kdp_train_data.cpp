// kdp-train's data: which datasets of which files are the training and the
// validation samples (splits as groups, a second file, or a held-out
// fraction), their normalisation, and the loss their targets take.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "kdp_train.hpp"

namespace kdp::train_tool {

namespace fs = std::filesystem;

namespace {

// A dataset's path for a split: names are looked up in the split's group
// (/train/images), paths starting with '/' are used as they are.
std::string path_in(const std::string& name, const char* split) {
  return name.rfind('/', 0) == 0 ? name : fmt::format("/{}/{}", split, name);
}

// Whether the validation samples are held out of the training ones: asked
// for, or the data is one set of samples (a path, no /train and /test) and no
// other file holds them.
bool held_out(const Options& o) {
  return o.val_fraction > 0.0 || (o.inputs.rfind('/', 0) == 0 && o.val_data.empty());
}

// Both parts train and evaluate one model: both hold samples, of one kind.
void check_splits(const Options& o, const TrainingData& d) {
  for (const auto& [part, name, what] : {std::tuple{d.train.get(), &d.train_name, "train on"},
                                         std::tuple{d.test.get(), &d.test_name, "evaluate on"}}) {
    if (part->size() == 0) {
      throw ValueError(
          fmt::format("{} holds no samples; kdp-train needs samples to {}", *name, what));
    }
  }
  if (d.train->sample_shape() != d.test->sample_shape() ||
      d.train->label_shape() != d.test->label_shape() ||
      (d.train->num_classes() == 0) != (d.test->num_classes() == 0)) {
    throw ValueError(fmt::format(
        "the training and validation samples differ: {} has samples {} and targets {}, {} has "
        "samples {} and targets {}",
        d.train_name, d.train->sample_shape().str(), d.train->label_shape().str(), d.test_name,
        d.test->sample_shape().str(), d.test->label_shape().str()));
  }
  if (o.batch_size > d.train->size()) {
    throw ValueError(fmt::format("--batch-size {} is larger than the {} training samples of {}",
                                 o.batch_size, d.train->size(), d.train_name));
  }
}

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
  TrainingData d;
  const std::string inputs = path_in(o.inputs, "train"), targets = path_in(o.targets, "train");
  d.source = std::make_shared<data::HDF5Dataset>(o.data, inputs, targets, h5);
  d.train = d.source;
  d.train_name = fmt::format("'{}' of '{}'", inputs, o.data);
  if (held_out(o)) {
    const double fraction = o.val_fraction > 0.0 ? o.val_fraction : 0.1;
    const data::HoldoutSplit split = data::holdout_split(d.source->size(), fraction, o.seed);
    d.train = std::make_shared<data::Subset>(d.source, split.train);
    d.test = std::make_shared<data::Subset>(d.source, split.held_out);
    d.test_name = fmt::format("the {} held out of {}", fraction, d.train_name);
    d.train_name = fmt::format("the rest of {}", d.train_name);
    return d;
  }
  const std::string& file = o.val_data.empty() ? o.data : o.val_data;
  const std::string vi = path_in(o.inputs, "test"), vt = path_in(o.targets, "test");
  d.test = std::make_shared<data::HDF5Dataset>(file, vi, vt, h5);
  d.test_name = fmt::format("'{}' of '{}'", vi, file);
  return d;
}

}  // namespace

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
  h5.flatten = !images;
  h5.as_images = images;
  TrainingData d = open_parts(o, h5);
  std::tie(d.mean, d.stddev) = feature_moments(*d.train);
  h5.mean = d.mean;
  h5.stddev = d.stddev;
  const float mean = d.mean, stddev = d.stddev;
  d = open_parts(o, h5);
  d.mean = mean;
  d.stddev = stddev;
  check_splits(o, d);
  return d;
}

nn::LossFunction make_loss(const Options& o, const TrainingData& d) {
  const std::string loss = o.loss.empty() ? (d.regression() ? "mse" : "cross_entropy") : o.loss;
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
