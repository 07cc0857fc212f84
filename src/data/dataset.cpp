#include "kdp/data/dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>

#include "core/check.hpp"
#include "data/byte_conversion.hpp"
#include "kdp/core/error.hpp"
#include "kdp/data/sampler.hpp"

namespace kdp::data {

namespace {

// `n` stored numbers at `src` as features, a loop per type (the type's
// switch out of it).
template <class T, class Read>
void convert_as(const unsigned char* src, float* dst, size_t n, const ByteFeatures& how,
                Read read) {
  for (size_t j = 0; j < n; ++j) {
    dst[j] = how(read(detail::stored_number<T>(src, static_cast<int64_t>(j))));
  }
}

}  // namespace

namespace detail {

void convert_features(const unsigned char* src, float* dst, size_t n, const ByteFeatures& how) {
  auto as_float = [](auto v) { return static_cast<float>(v); };
  switch (how.type) {
    case StoredType::UInt8:
      return convert_as<uint8_t>(src, dst, n, how, as_float);
    case StoredType::Int8:
      return convert_as<int8_t>(src, dst, n, how, as_float);
    case StoredType::UInt16:
      return convert_as<uint16_t>(src, dst, n, how, as_float);
    case StoredType::Int16:
      return convert_as<int16_t>(src, dst, n, how, as_float);
    case StoredType::UInt32:
      return convert_as<uint32_t>(src, dst, n, how, as_float);
    case StoredType::Int32:
      return convert_as<int32_t>(src, dst, n, how, as_float);
    case StoredType::Float16:
      return convert_as<uint16_t>(src, dst, n, how, detail::half_to_float);
    case StoredType::Float32:
      return convert_as<float>(src, dst, n, how, as_float);
    case StoredType::Float64:
      return convert_as<double>(src, dst, n, how, as_float);
  }
}

}  // namespace detail

void Dataset::fetch_bytes(const std::vector<int64_t>&, uint8_t*, float*) const {
  KDP_FAIL(StateError, "this dataset's features are not bytes");
}

TensorDataset::TensorDataset(std::vector<float> features, Shape sample_shape,
                             std::vector<float> labels, Shape label_shape, int64_t num_classes)
    : features_(std::move(features)),
      sample_shape_(sample_shape),
      labels_(std::move(labels)),
      label_shape_(label_shape),
      num_classes_(num_classes) {
  const int64_t per = sample_shape_.numel();
  const int64_t lper = label_shape_.numel();
  KDP_CHECK(per != 0 && static_cast<int64_t>(features_.size()) % per == 0, ShapeError,
            "{} feature values do not split into "
            "samples of shape {}",
            features_.size(), sample_shape_.str());
  n_ = static_cast<int64_t>(features_.size()) / per;
  KDP_CHECK(static_cast<int64_t>(labels_.size()) == n_ * lper, ShapeError,
            "{} samples need {} label values of "
            "shape {}, got {}",
            n_, n_ * lper, label_shape_.str(), labels_.size());
}

void TensorDataset::fetch(const std::vector<int64_t>& indices, float* features,
                          float* labels) const {
  const auto per = static_cast<size_t>(sample_shape_.numel());
  const auto lper = static_cast<size_t>(label_shape_.numel());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    KDP_CHECK(i >= 0 && i < n_, ValueError, "index {} is outside [0, {})", i, n_);
    std::memcpy(features + k * per, features_.data() + static_cast<size_t>(i) * per,
                per * sizeof(float));
    std::memcpy(labels + k * lper, labels_.data() + static_cast<size_t>(i) * lper,
                lper * sizeof(float));
  }
}

std::shared_ptr<TensorDataset> synthetic_regression(int64_t n, int64_t inputs, int64_t outputs,
                                                    uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * inputs)), y(static_cast<size_t>(n * outputs));
  for (auto& v : x) v = normal(gen);
  for (auto& v : y) v = normal(gen);
  return std::make_shared<TensorDataset>(std::move(x), Shape{inputs}, std::move(y), Shape{outputs});
}

std::shared_ptr<TensorDataset> synthetic_classification(int64_t n, int64_t inputs, int64_t classes,
                                                        uint64_t seed) {
  KDP_CHECK(classes >= 2, ValueError, "needs at least 2 classes");
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int64_t hidden = 32;
  std::vector<float> w1(static_cast<size_t>(hidden * inputs)),
      w2(static_cast<size_t>(classes * hidden));
  for (auto& v : w1) v = normal(gen) / std::sqrt(static_cast<float>(inputs));
  for (auto& v : w2) v = normal(gen) / std::sqrt(static_cast<float>(hidden));
  std::vector<float> x(static_cast<size_t>(n * inputs)), y(static_cast<size_t>(n));
  for (auto& v : x) v = normal(gen);
  std::vector<float> h(static_cast<size_t>(hidden));
  for (int64_t s = 0; s < n; ++s) {
    const float* xs = x.data() + s * inputs;
    for (int64_t j = 0; j < hidden; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < inputs; ++i) acc += w1[static_cast<size_t>(j * inputs + i)] * xs[i];
      h[static_cast<size_t>(j)] = std::tanh(acc);
    }
    int64_t best = 0;
    float best_v = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < hidden; ++j)
        acc += w2[static_cast<size_t>(c * hidden + j)] * h[static_cast<size_t>(j)];
      if (acc > best_v) {
        best_v = acc;
        best = c;
      }
    }
    y[static_cast<size_t>(s)] = static_cast<float>(best);
  }
  return std::make_shared<TensorDataset>(std::move(x), Shape{inputs}, std::move(y), Shape{},
                                         classes);
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  KDP_CHECK(dataset_ != nullptr, ValueError, "no dataset to take samples of");
  const int64_t n = dataset_->size();
  for (int64_t i : indices_) {
    KDP_CHECK(i >= 0 && i < n, ValueError, "index {} is outside the dataset's [0, {})", i, n);
  }
}

std::vector<int64_t> Subset::map(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> out;
  out.reserve(indices.size());
  for (int64_t i : indices) {
    KDP_CHECK(i >= 0 && i < size(), ValueError, "index {} is outside [0, {})", i, size());
    out.push_back(indices_[static_cast<size_t>(i)]);
  }
  return out;
}

void Subset::fetch(const std::vector<int64_t>& indices, float* features, float* labels) const {
  dataset_->fetch(map(indices), features, labels);
}

void Subset::fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                         float* labels) const {
  dataset_->fetch_bytes(map(indices), features, labels);
}

HoldoutSplit holdout_split(int64_t n, double fraction, uint64_t seed) {
  KDP_CHECK(fraction > 0.0 && fraction < 1.0, ValueError,
            "a held-out fraction of {} is not in (0, 1)", fraction);
  const auto held = static_cast<int64_t>(std::llround(static_cast<double>(n) * fraction));
  KDP_CHECK(held >= 1 && held < n, ValueError,
            "holding out {} of {} samples leaves {} for validation and {} for training; both "
            "need at least one",
            fraction, n, held, n - held);
  const std::vector<int64_t> order = permutation(n, seed);
  HoldoutSplit s;
  s.held_out.assign(order.begin(), order.begin() + held);
  s.train.assign(order.begin() + held, order.end());
  std::sort(s.held_out.begin(), s.held_out.end());
  std::sort(s.train.begin(), s.train.end());
  return s;
}

float stored_scale(const Dataset& d) {
  const std::optional<ByteFeatures> b = d.byte_features();
  return b ? b->scale : 1.0f;
}

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets,
                             std::vector<std::string> names)
    : parts_(std::move(datasets)) {
  KDP_CHECK(!parts_.empty() && names.size() == parts_.size(), ValueError,
            "{} datasets and {} names: one name (its file) per dataset", parts_.size(),
            names.size());
  offsets_.push_back(0);
  const Dataset& first = *parts_.front();
  const auto kind = [](const Dataset& d) {
    const float scale = stored_scale(d);
    return fmt::format("{} samples {}, targets {}{}{}", d.feature_type(), d.sample_shape().str(),
                       d.label_shape().str(), d.num_classes() > 0 ? " (classes)" : " (floats)",
                       scale != 1.0f ? fmt::format(" scaled by {}", scale) : "");
  };
  bytes_ = first.byte_features();
  for (size_t k = 0; k < parts_.size(); ++k) {
    const Dataset& d = *parts_[k];
    const bool same = d.feature_type() == first.feature_type() &&
                      d.sample_shape() == first.sample_shape() &&
                      d.label_shape() == first.label_shape() &&
                      (d.num_classes() > 0) == (first.num_classes() > 0) &&
                      stored_scale(d) == stored_scale(first);
    // (Parts stored alike may still be standardised differently, by their
    // own options: those are converted on the host, part by part.)
    if (d.byte_features() != bytes_) bytes_.reset();
    KDP_CHECK(same, ValueError, "'{}' holds {} where '{}' holds {}: they cannot be one dataset",
              names[k], kind(d), names.front(), kind(first));
    classes_ = std::max(classes_, d.num_classes());
    offsets_.push_back(offsets_.back() + d.size());
  }
}

template <class T>
void ConcatDataset::gather(const std::vector<int64_t>& indices, T* features, float* labels) const {
  // (Stored numbers: their bytes.)
  const auto row =
      static_cast<size_t>(sample_shape().numel()) *
      (std::is_same_v<T, uint8_t> ? static_cast<size_t>(stored_bytes(bytes_->type)) : 1);
  const auto lrow = static_cast<size_t>(label_shape().numel());
  std::vector<std::vector<int64_t>> local(parts_.size()), where(parts_.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    KDP_CHECK(i >= 0 && i < size(), ValueError, "index {} is outside [0, {})", i, size());
    const auto p = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), i) -
                                       offsets_.begin() - 1);
    local[p].push_back(i - offsets_[p]);
    where[p].push_back(static_cast<int64_t>(k));
  }
  std::vector<T> f;
  std::vector<float> l;
  for (size_t p = 0; p < parts_.size(); ++p) {
    if (local[p].empty()) continue;
    f.resize(local[p].size() * row);
    l.resize(local[p].size() * lrow);
    if constexpr (std::is_same_v<T, uint8_t>) {
      parts_[p]->fetch_bytes(local[p], f.data(), l.data());
    } else {
      parts_[p]->fetch(local[p], f.data(), l.data());
    }
    for (size_t j = 0; j < local[p].size(); ++j) {
      const auto k = static_cast<size_t>(where[p][j]);
      std::memcpy(features + k * row, f.data() + j * row, row * sizeof(T));
      std::memcpy(labels + k * lrow, l.data() + j * lrow, lrow * sizeof(float));
    }
  }
}

void ConcatDataset::fetch(const std::vector<int64_t>& indices, float* features,
                          float* labels) const {
  gather(indices, features, labels);
}

void ConcatDataset::fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                                float* labels) const {
  KDP_CHECK(bytes_.has_value(), StateError,
            "the parts are not converted alike (byte_features() is none): fetch() their features");
  gather(indices, features, labels);
}

}  // namespace kdp::data
