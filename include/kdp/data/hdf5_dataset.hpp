#pragma once
/// \file
/// HDF5Dataset: samples from datasets of an HDF5 file (kdp's layout is
/// /<split>/images and /<split>/labels). Each process opens the file read-only
/// and reads only the parts of it its batches need: the features are read in
/// blocks of the dataset's chunk size (HDF5 decompresses whole chunks anyway),
/// a batch's missing blocks sorted and coalesced into as few contiguous
/// hyperslab reads as possible, and the blocks kept in a bounded cache, so that
/// shuffled batches cost about what a sequential read of the same bytes does.
/// Deflate-compressed chunks are read as stored and inflated on the rank's
/// threads while HDF5 reads the next ones (libhdf5 itself is not thread-safe).

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "kdp/data/dataset.hpp"

namespace kdp::data {

/// Scaling, standardisation, flattening, class count and checks of an HDF5Dataset.
struct HDF5DatasetOptions {
  /// uint8 features are scaled to [0, 1] (divided by 255).
  bool scale = true;
  /// Then standardised: (x - mean) / stddev, when stddev > 0.
  float mean = 0.0f;
  float stddev = 0.0f;
  /// Samples flattened to one dimension ([28, 28] -> [784]).
  bool flatten = false;
  /// Samples as images [channels, height, width], as convolutions take them:
  /// one channel is added to samples of rank 2 ([28, 28] -> [1, 28, 28]).
  bool as_images = false;
  /// Number of classes; 0 takes the num_classes attribute of the labels' group,
  /// or the largest label + 1. Labels outside it are an error at open.
  int64_t num_classes = 0;
  /// Float features that are NaN or infinite are a NumericalError naming the
  /// sample (off: passed through).
  bool check_finite = true;
  /// Most memory for cached blocks of features (least recently used blocks are
  /// dropped beyond it); a cache that holds the dataset reads each block once.
  size_t cache_bytes = size_t{512} << 20;
  /// Threads that inflate deflate-compressed chunks while HDF5 reads the next
  /// ones (0: the rank's threads, Runtime::threads(); 1 without a Runtime).
  int inflate_threads = 0;

  /// Chained setters, one per option, to name each where it is set:
  /// HDF5DatasetOptions{}.with_scale(...).with_inflate_threads(...).
  HDF5DatasetOptions& with_scale(bool value) {
    scale = value;
    return *this;
  }
  HDF5DatasetOptions& with_mean(float value) {
    mean = value;
    return *this;
  }
  HDF5DatasetOptions& with_stddev(float value) {
    stddev = value;
    return *this;
  }
  HDF5DatasetOptions& with_flatten(bool value) {
    flatten = value;
    return *this;
  }
  HDF5DatasetOptions& with_as_images(bool value) {
    as_images = value;
    return *this;
  }
  HDF5DatasetOptions& with_num_classes(int64_t value) {
    num_classes = value;
    return *this;
  }
  HDF5DatasetOptions& with_check_finite(bool value) {
    check_finite = value;
    return *this;
  }
  HDF5DatasetOptions& with_cache_bytes(size_t value) {
    cache_bytes = value;
    return *this;
  }
  HDF5DatasetOptions& with_inflate_threads(int value) {
    inflate_threads = value;
    return *this;
  }
};

/// Samples read from datasets of an HDF5 file, in cached blocks.
class HDF5Dataset : public Dataset {
 public:
  HDF5Dataset(const std::string& path, const std::string& images, const std::string& labels,
              HDF5DatasetOptions options = {});
  /// /<split>/images and /<split>/labels.
  HDF5Dataset(const std::string& path, const std::string& split, HDF5DatasetOptions options = {});
  ~HDF5Dataset() override;

  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return sample_shape_; }
  /// [] for class labels; a float target's shape after the sample dimension.
  Shape label_shape() const override { return label_shape_; }
  int64_t num_classes() const override { return num_classes_; }
  void fetch(const std::vector<int64_t>& indices, float* features, float* labels) const override;
  /// Features of uint8 to int32 and float16: their type, scale and
  /// standardisation (float32 and float64 ones are converted as read).
  std::optional<ByteFeatures> byte_features() const override;
  /// How this dataset's stored values become features (its options).
  ByteFeatures normalisation() const;
  void fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                   float* labels) const override;

  /// How many hyperslab reads the last fetch made (0 when all was cached).
  int64_t last_read_runs() const { return last_runs_.load(); }
  /// Rows per block (the dataset's chunk rows).
  int64_t block_rows() const { return block_rows_; }
  const std::string& path() const { return path_; }
  /// The type the features are stored as, as numpy names it: "uint8",
  /// "int16", "float16", "float32", ... (uint8 ones are scaled by 1/255 when
  /// options().scale).
  std::string feature_type() const override { return feature_type_; }
  const HDF5DatasetOptions& options() const { return options_; }

 private:
  // fetch() with float features, or fetch_bytes() with `bytes` instead.
  void fill(const std::vector<int64_t>& indices, float* features, uint8_t* bytes,
            float* labels) const;
  // fill()'s last step: the samples out of the cached blocks, converted.
  void copy_samples(const std::vector<int64_t>& indices, float* features, uint8_t* bytes,
                    float* labels) const;
  struct Files;
  std::unique_ptr<Files> files_;
  std::string path_, images_, labels_;
  HDF5DatasetOptions options_;
  int64_t n_ = 0;
  int64_t row_ = 0;  // feature values per sample
  Shape sample_shape_;
  int64_t num_classes_ = 0;
  StoredType cached_ = StoredType::UInt8;  // as stored; float64 as float32
  std::string feature_type_;
  std::vector<float> label_values_;
  Shape label_shape_;
  int64_t label_row_ = 1;  // floats per sample's target
  int64_t block_rows_ = 128;
  mutable std::atomic<int64_t> last_runs_{0};
  mutable std::mutex cache_mutex_;
};

}  // namespace kdp::data
