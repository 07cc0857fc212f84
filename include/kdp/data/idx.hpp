#pragma once
/// \file
/// The IDX format of MNIST and Fashion-MNIST (plain or gzip-compressed): a magic
/// number (two zero bytes, the element type, the number of dimensions), the
/// dimensions as big-endian 32-bit integers, then the data.

#include <cstdint>
#include <string>
#include <vector>

namespace kdp::data {

/// An IDX file of unsigned bytes.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
  int64_t count() const { return dims.empty() ? 0 : dims[0]; }
};

/// The most data an IDX file may claim (4 GiB); a header claiming more is
/// rejected before anything is allocated.
inline constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 32;

/// Reads an IDX file of unsigned bytes, gzip-compressed or plain. Throws IOError
/// naming the file for a missing file, a wrong magic number, an unsupported
/// element type, absurd dimensions, truncated or corrupt data, or trailing bytes.
IdxArray read_idx(const std::string& path, uint64_t max_bytes = kMaxIdxBytes);

/// Writes an IDX file of unsigned bytes (gzip-compressed when `gzip`).
void write_idx(const std::string& path, const std::vector<int64_t>& dims,
               const std::vector<uint8_t>& data, bool gzip);

}  // namespace kdp::data
