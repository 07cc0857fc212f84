#pragma once
/// \file
/// Dataset: a numbered collection of samples that fills host buffers with the
/// samples a batch needs. TensorDataset holds samples in memory; the synthetic
/// factories make data for tests and examples.

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kdp/core/kokkos_compat.hpp"
#include "kdp/core/shape.hpp"

namespace kdp::data {

/// The number types features may be stored as (numpy's uint8 ... float64).
enum class StoredType : uint8_t {
  UInt8,
  Int8,
  UInt16,
  Int16,
  UInt32,
  Int32,
  Float16,
  Float32,
  Float64
};

/// The bytes of one number of `type`.
KOKKOS_INLINE_FUNCTION int stored_bytes(StoredType type) {
  switch (type) {
    case StoredType::UInt8:
    case StoredType::Int8:
      return 1;
    case StoredType::UInt16:
    case StoredType::Int16:
    case StoredType::Float16:
      return 2;
    case StoredType::UInt32:
    case StoredType::Int32:
    case StoredType::Float32:
      return 4;
    case StoredType::Float64:
      return 8;
  }
  return 1;
}

namespace detail {
// Number `i` of an array of T at `data` (any alignment).
template <class T>
KOKKOS_INLINE_FUNCTION T stored_number(const unsigned char* data, int64_t i) {
  T v;
  std::memcpy(&v, data + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}
// An IEEE half-precision number's value (exact in float).
KOKKOS_INLINE_FUNCTION float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else {
    // Zero or subnormal: mantissa x 2^-24, exact in float.
    const float v = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign != 0 ? -v : v;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
}  // namespace detail

/// Number `i` of an array of `type` at `data`, as a float: exact but for
/// 32-bit integers beyond 2^24 and float64 (rounded to nearest).
KOKKOS_INLINE_FUNCTION float stored_value(const unsigned char* data, int64_t i, StoredType type) {
  switch (type) {
    case StoredType::UInt8:
      return static_cast<float>(data[i]);
    case StoredType::Int8:
      return static_cast<float>(detail::stored_number<int8_t>(data, i));
    case StoredType::UInt16:
      return static_cast<float>(detail::stored_number<uint16_t>(data, i));
    case StoredType::Int16:
      return static_cast<float>(detail::stored_number<int16_t>(data, i));
    case StoredType::UInt32:
      return static_cast<float>(detail::stored_number<uint32_t>(data, i));
    case StoredType::Int32:
      return static_cast<float>(detail::stored_number<int32_t>(data, i));
    case StoredType::Float16:
      return detail::half_to_float(detail::stored_number<uint16_t>(data, i));
    case StoredType::Float32:
      return detail::stored_number<float>(data, i);
    case StoredType::Float64:
      return static_cast<float>(detail::stored_number<double>(data, i));
  }
  return 0.0f;
}

/// How stored numbers become features: feature = (value * scale - mean) /
/// stddev (no standardisation when stddev is 0), the value read as `type`.
/// The one formula kdp normalises with, on the host (HDF5Dataset) and on
/// devices (the DataLoader's conversion of stored numbers), so both give the
/// same floats.
struct ByteFeatures {
  float scale = 1.0f;
  float mean = 0.0f;
  float stddev = 0.0f;
  StoredType type = StoredType::UInt8;

  KOKKOS_INLINE_FUNCTION float operator()(float value) const {
    const float v = value * scale;
    return stddev > 0.0f ? (v - mean) * (1.0f / stddev) : v;
  }
  /// The feature of number `i` of an array of `type` at `data`.
  KOKKOS_INLINE_FUNCTION float operator()(const unsigned char* data, int64_t i) const {
    return (*this)(stored_value(data, i, type));
  }
  bool operator==(const ByteFeatures& o) const {
    return scale == o.scale && mean == o.mean && stddev == o.stddev && type == o.type;
  }
  bool operator!=(const ByteFeatures& o) const { return !(*this == o); }
};

/// A numbered collection of samples that fills host buffers.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// The shape of one sample's features ([28, 28], [10]).
  virtual Shape sample_shape() const = 0;
  /// The shape of one label: [] for a class index, [k] for a target vector.
  virtual Shape label_shape() const = 0;
  /// The number of classes when labels are class indices, else 0.
  virtual int64_t num_classes() const { return 0; }
  /// The type the features are stored as, as numpy names it ("uint8",
  /// "float32", ...); datasets in memory hold float32.
  virtual std::string feature_type() const { return "float32"; }
  /// Writes samples `indices` (in that order) into `features` and `labels`,
  /// which hold indices.size() samples. Called from the loader's thread.
  virtual void fetch(const std::vector<int64_t>& indices, float* features, float* labels) const = 0;

  /// Datasets that store features as numbers smaller than a float (uint8,
  /// int16, float16, ...) or of other types can hand them over as stored (a
  /// quarter of the floats' bytes for uint8), for the DataLoader to convert
  /// on the device: this says how, or nothing when they are floats already.
  virtual std::optional<ByteFeatures> byte_features() const { return std::nullopt; }
  /// Like fetch(), with the features as stored (byte_features() says their
  /// type and how they become floats: stored_bytes(type) bytes per feature).
  /// Only called when byte_features() has a value.
  virtual void fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                           float* labels) const;
};

/// The scale of `d`'s stored numbers (1/255 for images of bytes by default,
/// else 1): datasets whose scales differ cannot feed one model.
float stored_scale(const Dataset& d);

/// Samples held in host memory.
class TensorDataset : public Dataset {
 public:
  TensorDataset(std::vector<float> features, Shape sample_shape, std::vector<float> labels,
                Shape label_shape, int64_t num_classes = 0);
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return sample_shape_; }
  Shape label_shape() const override { return label_shape_; }
  int64_t num_classes() const override { return num_classes_; }
  void fetch(const std::vector<int64_t>& indices, float* features, float* labels) const override;

 private:
  std::vector<float> features_;
  Shape sample_shape_;
  std::vector<float> labels_;
  Shape label_shape_;
  int64_t num_classes_;
  int64_t n_;
};

/// Samples `indices` of another dataset, in that order (torch.utils.data.Subset).
class Subset : public Dataset {
 public:
  /// Indices outside the dataset are a ValueError.
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Shape sample_shape() const override { return dataset_->sample_shape(); }
  Shape label_shape() const override { return dataset_->label_shape(); }
  int64_t num_classes() const override { return dataset_->num_classes(); }
  std::string feature_type() const override { return dataset_->feature_type(); }
  void fetch(const std::vector<int64_t>& indices, float* features, float* labels) const override;
  std::optional<ByteFeatures> byte_features() const override { return dataset_->byte_features(); }
  void fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                   float* labels) const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::vector<int64_t> map(const std::vector<int64_t>& indices) const;
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

/// Several datasets as one, in order (torch.utils.data.ConcatDataset): as
/// simulations write one file per job. All must hold samples of one kind
/// (sample shape, target shape, classes, the type and scale of the stored
/// numbers);
/// one that differs is a ValueError naming it by `names` (its file).
class ConcatDataset : public Dataset {
 public:
  ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets,
                std::vector<std::string> names);
  int64_t size() const override { return offsets_.back(); }
  Shape sample_shape() const override { return parts_.front()->sample_shape(); }
  Shape label_shape() const override { return parts_.front()->label_shape(); }
  int64_t num_classes() const override { return classes_; }
  std::string feature_type() const override { return parts_.front()->feature_type(); }
  void fetch(const std::vector<int64_t>& indices, float* features, float* labels) const override;
  std::optional<ByteFeatures> byte_features() const override { return bytes_; }
  void fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                   float* labels) const override;
  const std::vector<std::shared_ptr<const Dataset>>& parts() const { return parts_; }

 private:
  // Each part's share of `indices`: its local indices and their positions.
  template <class T>
  void gather(const std::vector<int64_t>& indices, T* features, float* labels) const;
  std::vector<std::shared_ptr<const Dataset>> parts_;
  std::vector<int64_t> offsets_;  // first index of each part, then the total
  int64_t classes_ = 0;           // the most of any part (classes count from 0)
  std::optional<ByteFeatures> bytes_;
};

/// A held-out split of n samples: a permutation of 0..n-1 drawn from `seed`
/// (the same on every machine), its first round(n * fraction) samples held
/// out for validation and the rest for training; each part sorted, so that
/// reads stay in file order. `fraction` in (0, 1), and both parts non-empty.
struct HoldoutSplit {
  std::vector<int64_t> train, held_out;
};
HoldoutSplit holdout_split(int64_t n, double fraction, uint64_t seed);

/// n samples of `inputs` standard-normal features with `outputs` standard-normal
/// targets (the explainer's random regression data).
std::shared_ptr<TensorDataset> synthetic_regression(int64_t n, int64_t inputs, int64_t outputs,
                                                    uint64_t seed);

/// n samples of `inputs` features whose class is the argmax of a fixed random
/// teacher network (inputs -> 32 -> tanh -> classes): a task an MLP can learn.
std::shared_ptr<TensorDataset> synthetic_classification(int64_t n, int64_t inputs, int64_t classes,
                                                        uint64_t seed);

}  // namespace kdp::data
