// kdp-data import-npy: numpy arrays (.npy files, .npz members) streamed into
// kdp's dataset layout, block by block.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/check.hpp"
#include "importer_detail.hpp"
#include "kdp/core/error.hpp"
#include "npy.hpp"

namespace kdp::data {

namespace fs = std::filesystem;

namespace {

using detail::NpyHeader;
using detail::NpyReader;

// IEEE half precision to float, exactly.
float half_to_float(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  float v = 0.0f;
  if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    v = mantissa == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  }
  return (h & 0x8000) != 0 ? -v : v;
}

// Element k of raw bytes as stored, as a double (exact for every type but
// 64-bit integers beyond 2^53, which are refused for inputs).
double element(const unsigned char* raw, size_t k, const NpyHeader& h) {
  unsigned char b[8];
  std::memcpy(b, raw + k * static_cast<size_t>(h.item_bytes), static_cast<size_t>(h.item_bytes));
  if (h.big_endian) std::reverse(b, b + h.item_bytes);
  switch (h.kind) {
    case 'f':
      if (h.item_bytes == 2) {
        uint16_t v;
        std::memcpy(&v, b, 2);
        return half_to_float(v);
      }
      if (h.item_bytes == 4) {
        float v;
        std::memcpy(&v, b, 4);
        return v;
      }
      {
        double v;
        std::memcpy(&v, b, 8);
        return v;
      }
    case 'u':
    case 'b': {
      uint64_t v = 0;
      std::memcpy(&v, b, static_cast<size_t>(h.item_bytes));  // little-endian host
      return static_cast<double>(v);
    }
    default: {
      int64_t v = 0;
      std::memcpy(&v, b, static_cast<size_t>(h.item_bytes));
      const int shift = 64 - 8 * h.item_bytes;  // sign-extend
      return static_cast<double>(shift > 0 ? (v << shift) >> shift : v);
    }
  }
}

// How an array is stored in the output: bytes as bytes, 64-bit floats and
// 32-bit integers as float64 (exact), the rest as float32 (exact); integer
// targets as int64 classes.
io::h5::Type stored_as(const NpyHeader& h, bool classes) {
  if (classes) return io::h5::Type::Int64;
  if (h.kind == 'u' && h.item_bytes == 1) return io::h5::Type::UInt8;
  if (h.item_bytes == 8 || (h.kind != 'f' && h.item_bytes == 4)) return io::h5::Type::Float64;
  return io::h5::Type::Float32;
}

// Streams every row of `r` into `d`, converted, refusing non-finite floats
// (naming the sample) and, for classes, negative or too large ones; returns
// the largest class.
template <class T>
int64_t copy_rows(NpyReader& r, io::h5::Dataset& d, bool classes, int64_t num_classes,
                  const std::string& out) {
  const NpyHeader& h = r.header();
  const uint64_t row = h.row_bytes();
  const size_t per = static_cast<size_t>(row / static_cast<uint64_t>(h.item_bytes));
  const int64_t block = std::max<int64_t>(1, static_cast<int64_t>((uint64_t{16} << 20) / row));
  std::vector<unsigned char> raw;
  std::vector<T> values;
  int64_t largest = -1;
  for (int64_t start = 0; start < h.rows(); start += block) {
    const int64_t n = std::min(block, h.rows() - start);
    raw.resize(static_cast<size_t>(row) * static_cast<size_t>(n));
    values.resize(per * static_cast<size_t>(n));
    r.read_rows(n, raw.data());
    for (size_t k = 0; k < values.size(); ++k) {
      const double v = element(raw.data(), k, h);
      const int64_t sample = start + static_cast<int64_t>(k / per);
      KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_npy"), std::isfinite(v), IOError,
                    "value {} of sample {} in '{}' is {}: kdp takes finite numbers", k % per,
                    sample, r.name(), v);
      if (classes) {
        KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_npy"),
                      v >= 0 && (num_classes <= 0 || v < static_cast<double>(num_classes)), IOError,
                      "label {} of sample {} in '{}' is out of range for {}", v, sample, r.name(),
                      num_classes > 0 ? fmt::format("{} classes", num_classes)
                                      : std::string("classes (they start at 0)"));
        largest = std::max(largest, static_cast<int64_t>(v));
      }
      values[k] = static_cast<T>(v);
    }
    d.write_rows(start, n, values.data());
    detail::check_interrupted(out);
  }
  return largest;
}

int64_t copy_all(NpyReader& r, io::h5::Dataset& d, io::h5::Type type, int64_t num_classes,
                 const std::string& out) {
  switch (type) {
    case io::h5::Type::UInt8:
      return copy_rows<uint8_t>(r, d, false, 0, out);
    case io::h5::Type::Int64:
      return copy_rows<int64_t>(r, d, true, num_classes, out);
    case io::h5::Type::Float64:
      return copy_rows<double>(r, d, false, 0, out);
    default:
      return copy_rows<float>(r, d, false, 0, out);
  }
}

void write_npy_split(io::h5::File& file, const NpySource& src, const ImportOptions& options,
                     const std::string& out) {
  NpyReader x(src.inputs), y(src.targets);
  const NpyHeader &xh = x.header(), &yh = y.header();
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_npy"), xh.shape.size() >= 2, IOError,
                "'{}' has shape ({}); inputs need a sample dimension and at least one more",
                x.name(), fmt::join(xh.shape, ", "));
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_npy"), xh.rows() > 0 && xh.row_bytes() > 0, IOError,
                "'{}' holds no samples (its shape is ({}))", x.name(), fmt::join(xh.shape, ", "));
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_npy"),
                xh.kind != 'b' && !(xh.kind != 'f' && xh.item_bytes == 8), IOError,
                "'{}' holds {}; inputs must be numbers of uint8 to uint32/int32 or float16 to "
                "float64",
                x.name(), xh.dtype());
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_npy"), !yh.shape.empty() && yh.rows() == xh.rows(),
                IOError, "'{}' has {} samples but '{}' has {} targets", x.name(), xh.rows(),
                y.name(), yh.shape.empty() ? 0 : yh.rows());
  const bool classes = yh.kind != 'f';
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_npy"), !classes || yh.shape.size() == 1, IOError,
                "'{}' holds integer targets of shape ({}); class labels are one per sample "
                "(float targets may have any shape)",
                y.name(), fmt::join(yh.shape, ", "));
  if (file.exists(src.split)) H5Ldelete(file.id(), src.split.c_str(), H5P_DEFAULT);  // Overwrite
  io::h5::Group group = file.create_group(src.split);
  const io::h5::Type xt = stored_as(xh, false), yt = stored_as(yh, classes);
  io::h5::Dataset images =
      group.create_dataset("images", xt, xh.shape, options.chunk_rows, options.deflate);
  copy_all(x, images, xt, 0, out);
  io::h5::Dataset labels = group.create_dataset("labels", yt, yh.shape, options.chunk_rows, 0);
  const int64_t largest = copy_all(y, labels, yt, options.num_classes, out);
  group.set_attribute("source_inputs", fs::absolute(x.name()).string());
  group.set_attribute("source_targets", fs::absolute(y.name()).string());
  if (classes) {
    group.set_attribute("num_classes", options.num_classes > 0 ? options.num_classes : largest + 1);
  }
}

}  // namespace

void import_npy(const std::vector<NpySource>& splits, const std::string& out,
                const ImportOptions& options) {
  std::vector<std::string> names;
  for (const NpySource& s : splits) names.push_back(s.split);
  detail::import_splits(names, out, options, [&](io::h5::File& file) {
    for (const auto& s : splits) write_npy_split(file, s, options, out);
  });
}

}  // namespace kdp::data
