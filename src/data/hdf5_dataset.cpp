#include "kdp/data/hdf5_dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.hpp"
#include "data/byte_conversion.hpp"
#include "io/hdf5.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/runtime.hpp"

namespace kdp::data {

// A cached block: a range of the buffer one read filled. When the whole
// dataset fits in the cache, blocks share their read's buffer instead of
// copying out of it (the first epoch reads every block once, and a copy of
// each costs as much as the read); otherwise each has its own, so that
// evicting it frees it.
struct CachedBlock {
  std::shared_ptr<const std::vector<unsigned char>> run;
  size_t offset = 0, size = 0;
  bool empty() const { return !run; }
  const unsigned char* data() const { return run->data() + offset; }
};

// What a read of blocks needs to know of the dataset.
struct BlockLayout {
  int64_t rows;        // samples in the dataset
  int64_t block_rows;  // samples per block
  size_t row_bytes;    // bytes per sample, as cached
  StoredType type;     // the numbers' type in the cache
};

// Rows [row0, row0 + rows) of `d` as numbers of T (HDF5 converts what is
// stored otherwise), from the chunks on `threads` threads where it can.
template <class T>
void read_as(const io::h5::Dataset& d, int64_t row0, int64_t rows, unsigned char* out,
             int threads) {
  T* values = reinterpret_cast<T*>(out);
  if (!d.read_rows_inflating<T>(row0, rows, values, threads)) d.read_rows<T>(row0, rows, values);
}

void read_numbers(const io::h5::Dataset& d, StoredType type, int64_t row0, int64_t rows,
                  unsigned char* out, int threads) {
  switch (type) {
    case StoredType::UInt8:
      return read_as<uint8_t>(d, row0, rows, out, threads);
    case StoredType::Int8:
      return read_as<int8_t>(d, row0, rows, out, threads);
    case StoredType::UInt16:
      return read_as<uint16_t>(d, row0, rows, out, threads);
    case StoredType::Int16:
      return read_as<int16_t>(d, row0, rows, out, threads);
    case StoredType::UInt32:
      return read_as<uint32_t>(d, row0, rows, out, threads);
    case StoredType::Int32:
      return read_as<int32_t>(d, row0, rows, out, threads);
    case StoredType::Float16:
      return read_as<io::h5::Half>(d, row0, rows, out, threads);
    case StoredType::Float32:
      return read_as<float>(d, row0, rows, out, threads);
    case StoredType::Float64:
      return read_as<double>(d, row0, rows, out, threads);
  }
}

// [first block, count] of consecutive blocks read in one call.
using Runs = std::vector<std::pair<int64_t, int64_t>>;

struct HDF5Dataset::Files {
  io::h5::File file;
  io::h5::Dataset images;
  // Cached blocks of the features as stored, with least-recently-used order.
  std::vector<CachedBlock> blocks;
  std::vector<uint64_t> last_use;
  uint64_t clock = 0;
  size_t cached_bytes = 0;

  Runs missing_runs(const std::vector<int64_t>& indices, int64_t block_rows, uint64_t now,
                    bool fits);
  void read(const Runs& runs, const BlockLayout& l, uint64_t now, bool fits, int threads);
  void evict(size_t budget, uint64_t now);
};

// The blocks `indices` need that are not cached, sorted and coalesced into
// runs (marking every needed block used at `now`). When the whole dataset
// fits in the cache, the blocks between two missing ones are read with them
// if they are missing too: an epoch of shuffled batches needs every block
// anyway, and one long read is far cheaper than many.
Runs HDF5Dataset::Files::missing_runs(const std::vector<int64_t>& indices, int64_t block_rows,
                                      uint64_t now, bool fits) {
  std::vector<int64_t> missing;
  for (int64_t i : indices) {
    const int64_t b = i / block_rows;
    if (blocks[static_cast<size_t>(b)].empty()) missing.push_back(b);
    last_use[static_cast<size_t>(b)] = now;
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  auto gap_is_missing = [&](int64_t from, int64_t to) {
    for (int64_t b = from; b < to; ++b) {
      if (!blocks[static_cast<size_t>(b)].empty()) return false;
    }
    return true;
  };
  Runs runs;
  for (int64_t b : missing) {
    if (!runs.empty()) {
      const int64_t end = runs.back().first + runs.back().second;
      if (end == b || (fits && gap_is_missing(end, b))) {
        runs.back().second = b - runs.back().first + 1;
        continue;
      }
    }
    runs.emplace_back(b, 1);
  }
  return runs;
}

// Reads each run in one call (inflating compressed chunks on `threads`) and
// caches its blocks: sharing the run's memory when everything fits, else each
// in memory of its own, so that evicting it frees it.
void HDF5Dataset::Files::read(const Runs& runs, const BlockLayout& l, uint64_t now, bool fits,
                              int threads) {
  for (const auto& [first, count] : runs) {
    const int64_t row0 = first * l.block_rows;
    const int64_t rows = std::min(l.rows, (first + count) * l.block_rows) - row0;
    auto raw =
        std::make_shared<std::vector<unsigned char>>(static_cast<size_t>(rows) * l.row_bytes);
    read_numbers(images, l.type, row0, rows, raw->data(), threads);
    const size_t block_bytes = static_cast<size_t>(l.block_rows) * l.row_bytes;
    for (int64_t b = first; b < first + count; ++b) {
      last_use[static_cast<size_t>(b)] = now;
      const size_t from = static_cast<size_t>(b - first) * block_bytes;
      const size_t to = std::min(raw->size(), from + block_bytes);
      if (fits) {
        blocks[static_cast<size_t>(b)] = CachedBlock{raw, from, to - from};
      } else {
        blocks[static_cast<size_t>(b)] = CachedBlock{
            std::make_shared<std::vector<unsigned char>>(raw->begin() + static_cast<long>(from),
                                                         raw->begin() + static_cast<long>(to)),
            0, to - from};
      }
      cached_bytes += to - from;
    }
  }
}

// Beyond `budget`, drops the least recently used blocks (not those used at `now`).
void HDF5Dataset::Files::evict(size_t budget, uint64_t now) {
  while (cached_bytes > budget) {
    size_t victim = blocks.size();
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (!blocks[b].empty() && last_use[b] != now &&
          (victim == blocks.size() || last_use[b] < last_use[victim])) {
        victim = b;
      }
    }
    if (victim == blocks.size()) break;
    cached_bytes -= blocks[victim].size;
    blocks[victim] = CachedBlock{};
  }
}

namespace {

// The StoredType of numpy's name of a number type, if features may have it.
std::optional<StoredType> stored_type(const std::string& name) {
  static const std::pair<const char*, StoredType> types[] = {
      {"uint8", StoredType::UInt8},     {"int8", StoredType::Int8},
      {"uint16", StoredType::UInt16},   {"int16", StoredType::Int16},
      {"uint32", StoredType::UInt32},   {"int32", StoredType::Int32},
      {"float16", StoredType::Float16}, {"float32", StoredType::Float32},
      {"float64", StoredType::Float64}};
  for (const auto& [n, t] : types) {
    if (name == n) return t;
  }
  return std::nullopt;
}

}  // namespace

HDF5Dataset::HDF5Dataset(const std::string& path, const std::string& split,
                         HDF5DatasetOptions options)
    : HDF5Dataset(path, "/" + split + "/images", "/" + split + "/labels", options) {}

HDF5Dataset::~HDF5Dataset() = default;

namespace {

// Targets: class indices (integers, one per sample) or values (floats, [N,
// ...] of any shape: a regression), read whole.
struct Targets {
  std::vector<float> values;
  Shape shape;
  int64_t row = 1;  // floats per sample
  int64_t classes = 0;
};

Targets read_targets(io::h5::File& file, io::h5::Dataset& lab, const std::string& path,
                     const std::string& images, const std::string& labels, int64_t n,
                     int64_t num_classes) {
  Targets t;
  const std::vector<int64_t> ldims = lab.dims();
  const io::h5::Type ltype = lab.type();
  KDP_CHECK(!ldims.empty() && ldims[0] == n, IOError,
            "'{}' has {} samples but '{}' has {} labels in '{}'", images, n, labels,
            ldims.empty() ? 0 : ldims[0], path);
  if (ltype == io::h5::Type::Float32 || ltype == io::h5::Type::Float64) {
    const std::vector<int64_t> per(ldims.begin() + 1, ldims.end());
    t.shape = Shape(per);
    t.row = checked_numel(
        per, sizeof(float),
        fmt::format("kdp::data::HDF5Dataset: a target of '{}' in '{}'", labels, path));
    t.values = lab.read_all<float>();
    for (size_t i = 0; i < t.values.size(); ++i) {
      KDP_CHECK(std::isfinite(t.values[i]), IOError,
                "target {} of sample {} in '{}' of '{}' is {}: targets must be finite",
                i % static_cast<size_t>(t.row), i / static_cast<size_t>(t.row), labels, path,
                t.values[i]);
    }
    return t;
  }
  KDP_CHECK(ldims.size() == 1, IOError,
            "labels '{}' in '{}' have shape [{}]; class labels are one index per sample (float "
            "targets may have any shape)",
            labels, path, fmt::join(ldims, ", "));
  KDP_CHECK(ltype == io::h5::Type::UInt8 || ltype == io::h5::Type::UInt16 ||
                ltype == io::h5::Type::UInt32 || ltype == io::h5::Type::Int64,
            IOError, "labels '{}' in '{}' hold {}; they must be integer classes or float targets",
            labels, path, io::h5::to_string(ltype));
  const std::vector<int64_t> values = lab.read_all<int64_t>();
  int64_t& classes = t.classes;  // given, else the group's attribute, else the largest + 1
  classes = num_classes;
  if (classes <= 0) {
    const std::string group = labels.substr(0, labels.rfind('/'));
    io::h5::Group g = group.empty() ? io::h5::Group(file.open_group("/")) : file.open_group(group);
    if (g.has_attribute("num_classes")) {
      classes = g.attribute_int("num_classes");
    } else {
      classes = values.empty() ? 0 : *std::max_element(values.begin(), values.end()) + 1;
    }
  }
  t.values.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    KDP_CHECK(values[i] >= 0 && values[i] < classes, IOError,
              "label {} of sample {} in '{}' of '{}' is out of range for {} classes", values[i], i,
              labels, path, classes);
    t.values[i] = static_cast<float>(values[i]);
  }
  return t;
}

}  // namespace

HDF5Dataset::HDF5Dataset(const std::string& path, const std::string& images,
                         const std::string& labels, HDF5DatasetOptions options)
    : path_(path), images_(images), labels_(labels), options_(options) {
  io::h5::File file = io::h5::File::open(path);
  io::h5::Dataset img = file.open_dataset(images);
  io::h5::Dataset lab = file.open_dataset(labels);
  img.check_plausible();  // before any allocation sized by their headers
  lab.check_plausible();

  const std::vector<int64_t> dims = img.dims();
  KDP_CHECK(dims.size() >= 2, IOError,
            "'{}' in '{}' has shape [{}]; features need "
            "a sample dimension and at least one more",
            images, path, fmt::join(dims, ", "));
  // Features are cached as stored and converted to float32 as a batch is
  // made (on the device for the DataLoader, see byte_features()); uint8 ones
  // are scaled by 1/255.
  feature_type_ = img.type_name();
  const std::optional<StoredType> stored = stored_type(feature_type_);
  KDP_CHECK(stored.has_value(), IOError,
            "'{}' in '{}' holds {}; features must be numbers of uint8, int8, int16, uint16, "
            "int32, uint32, float16, float32 or float64",
            images, path, feature_type_);
  // float64 is cached (and sent to a device) rounded to float32: half the bytes.
  cached_ = *stored == StoredType::Float64 ? StoredType::Float32 : *stored;
  n_ = dims[0];
  std::vector<int64_t> sample(dims.begin() + 1, dims.end());
  // A batch adds a dimension to the sample's: both must fit a tensor.
  KDP_CHECK(static_cast<int>(sample.size()) < Shape::kMaxRank, ShapeError,
            "samples of '{}' in '{}' are [{}]; samples may have at most {} dimensions (a batch "
            "of them is a tensor of at most {})",
            images, path, fmt::join(sample, ", "), Shape::kMaxRank - 1, Shape::kMaxRank);
  row_ =
      checked_numel(sample, sizeof(float),
                    fmt::format("kdp::data::HDF5Dataset: a sample of '{}' in '{}'", images, path));
  KDP_CHECK(!options.flatten || !options.as_images, ValueError,
            "samples of '{}' cannot be both flat and images", path);
  if (options.as_images && sample.size() == 2) sample.insert(sample.begin(), 1);
  KDP_CHECK(!options.as_images || sample.size() == 3, ShapeError,
            "samples of '{}' in '{}' are [{}], not "
            "images ([height, width] or [channels, height, width])",
            images, path, fmt::join(sample, ", "));
  sample_shape_ = options.flatten ? Shape{row_} : Shape(sample);

  Targets t = read_targets(file, lab, path, images, labels, n_, options.num_classes);
  label_values_ = std::move(t.values);
  label_shape_ = t.shape;
  label_row_ = t.row;
  num_classes_ = t.classes;
  const int64_t chunk = img.chunk_rows();
  // Blocks of at most 64 MiB, however large a sample or a chunk claims to be.
  const int64_t row_bytes = std::max<int64_t>(1, row_ * stored_bytes(cached_));
  block_rows_ = std::max<int64_t>(
      1, std::min<int64_t>(chunk > 0 ? chunk : 128, (int64_t{64} << 20) / row_bytes));
  files_ = std::make_unique<Files>(Files{std::move(file), std::move(img), {}, {}, 0, 0});
  files_->blocks.resize(static_cast<size_t>((n_ + block_rows_ - 1) / block_rows_));
  files_->last_use.assign(files_->blocks.size(), 0);
}

void HDF5Dataset::fetch(const std::vector<int64_t>& indices, float* features, float* labels) const {
  fill(indices, features, nullptr, labels);
}

ByteFeatures HDF5Dataset::normalisation() const {
  ByteFeatures how;
  how.scale = cached_ == StoredType::UInt8 && options_.scale ? 1.0f / 255.0f : 1.0f;
  how.type = cached_;
  how.mean = options_.stddev > 0.0f ? options_.mean : 0.0f;
  how.stddev = options_.stddev > 0.0f ? options_.stddev : 0.0f;
  return how;
}

std::optional<ByteFeatures> HDF5Dataset::byte_features() const {
  // float32 (and float64, cached as float32) needs no conversion.
  if (cached_ == StoredType::Float32) return std::nullopt;
  return normalisation();
}

void HDF5Dataset::fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                              float* labels) const {
  KDP_CHECK(byte_features().has_value(), StateError,
            "'{}' in '{}' holds {}, which are converted as read, not handed over as stored",
            images_, path_, feature_type_);
  fill(indices, nullptr, features, labels);
}

void HDF5Dataset::fill(const std::vector<int64_t>& indices, float* features, uint8_t* bytes,
                       float* labels) const {
  if (indices.empty()) return;
  for (int64_t i : indices) {
    KDP_CHECK(i >= 0 && i < n_, ValueError, "index {} is outside [0, {}) of '{}'", i, n_, path_);
  }
  const BlockLayout layout{n_, block_rows_,
                           static_cast<size_t>(row_) * static_cast<size_t>(stored_bytes(cached_)),
                           cached_};
  std::lock_guard<std::mutex> lock(cache_mutex_);
  Files& f = *files_;
  const uint64_t now = ++f.clock;
  const bool fits = static_cast<size_t>(n_) * layout.row_bytes <= options_.cache_bytes;
  const Runs runs = f.missing_runs(indices, block_rows_, now, fits);
  last_runs_.store(static_cast<int64_t>(runs.size()));
  const int threads = options_.inflate_threads > 0 ? options_.inflate_threads
                      : Runtime::active()          ? Runtime::get().threads()
                                                   : 1;
  f.read(runs, layout, now, fits, threads);
  copy_samples(indices, features, bytes, labels);
  f.evict(options_.cache_bytes, now);
}

void HDF5Dataset::copy_samples(const std::vector<int64_t>& indices, float* features, uint8_t* bytes,
                               float* labels) const {
  const Files& f = *files_;
  const auto row = static_cast<size_t>(row_);
  const size_t row_bytes = row * static_cast<size_t>(stored_bytes(cached_));
  const ByteFeatures how = normalisation();
  const bool floats = cached_ == StoredType::Float16 || cached_ == StoredType::Float32;
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    const auto& block = f.blocks[static_cast<size_t>(i / block_rows_)];
    const unsigned char* src = block.data() + static_cast<size_t>(i % block_rows_) * row_bytes;
    const auto lrow = static_cast<size_t>(label_row_);
    std::memcpy(labels + k * lrow, label_values_.data() + static_cast<size_t>(i) * lrow,
                lrow * sizeof(float));
    // A NaN or Inf as stored (or a float64 beyond float32's range) is refused
    // whether the features are converted here or on the device.
    if (floats && options_.check_finite) {
      for (size_t j = 0; j < row; ++j) {
        const float v = stored_value(src, static_cast<int64_t>(j), cached_);
        KDP_CHECK(std::isfinite(v), NumericalError,
                  "sample {} of '{}' in '{}' has a non-finite feature ({}) at position {}", i,
                  images_, path_, v, j);
      }
    }
    if (bytes != nullptr) {
      std::memcpy(bytes + k * row_bytes, src, row_bytes);
    } else {
      detail::convert_features(src, features + k * row, row, how);
    }
  }
}

}  // namespace kdp::data
