#include "kdp/data/idx.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"

namespace kdp::data {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using Gz = std::unique_ptr<gzFile_s, GzCloser>;

std::string gz_error(gzFile f) {
  int code = 0;
  const char* msg = gzerror(f, &code);
  if (code == Z_ERRNO) return describe_file_error(errno);
  return msg != nullptr && *msg != '\0' ? msg : "unexpected end of data";
}

// Reads exactly n bytes or reports how many there were.
size_t read_some(gzFile f, uint8_t* out, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 20));
    const int r = gzread(f, out + got, chunk);
    KDP_CHECK(r >= 0, IOError, "'{}' is corrupt: {}", path, gz_error(f));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

IdxArray read_idx(const std::string& path, uint64_t max_bytes) {
  require_regular_file(path, "kdp::data", "IDX file ");  // a FIFO would block gzopen
  Gz f(gzopen(path.c_str(), "rb"));
  KDP_CHECK(f, IOError, "cannot open IDX file '{}': {}", path, describe_file_error(errno));
  uint8_t magic[4];
  KDP_CHECK(read_some(f.get(), magic, 4, path) == 4, IOError, "'{}' is too short to be an IDX file",
            path);
  KDP_CHECK(magic[0] == 0 && magic[1] == 0, IOError,
            "'{}' is not an IDX file (magic number {:02x}{:02x}{:02x}{:02x} does not start "
            "with two zero bytes)",
            path, magic[0], magic[1], magic[2], magic[3]);
  KDP_CHECK(magic[2] == 0x08, IOError,
            "'{}' holds IDX element type 0x{:02x}; only unsigned bytes (0x08) are supported", path,
            magic[2]);
  const int rank = magic[3];
  KDP_CHECK(rank >= 1 && rank <= 4, IOError,
            "'{}' claims {} dimensions; IDX files here have 1 to 4", path, rank);
  IdxArray out;
  uint64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    uint8_t b[4];
    KDP_CHECK(read_some(f.get(), b, 4, path) == 4, IOError, "'{}' ends inside its header", path);
    const uint64_t size =
        (uint64_t{b[0]} << 24) | (uint64_t{b[1]} << 16) | (uint64_t{b[2]} << 8) | b[3];
    out.dims.push_back(static_cast<int64_t>(size));
    KDP_CHECK(!__builtin_mul_overflow(total, size, &total) && total <= max_bytes, IOError,
              "'{}' claims dimensions that need more than {} bytes; refusing to read it", path,
              max_bytes);
  }
  // Grow with the data actually read, so a lying header cannot make us allocate.
  out.data.reserve(static_cast<size_t>(std::min<uint64_t>(total, uint64_t{64} << 20)));
  uint64_t got = 0;
  while (got < total) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(total - got, uint64_t{8} << 20));
    out.data.resize(static_cast<size_t>(got) + chunk);
    const size_t r = read_some(f.get(), out.data.data() + got, chunk, path);
    got += r;
    KDP_CHECK(r >= chunk, IOError,
              "'{}' is truncated: its header promises {} bytes of data "
              "but it ends after {}",
              path, total, got);
  }
  uint8_t extra = 0;
  KDP_CHECK(read_some(f.get(), &extra, 1, path) == 0, IOError,
            "'{}' has bytes after the {} its header promises", path, total);
  return out;
}

void write_idx(const std::string& path, const std::vector<int64_t>& dims,
               const std::vector<uint8_t>& data, bool gzip) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (int64_t d : dims) {
    const auto u = static_cast<uint32_t>(d);
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(u >> s));
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  Gz f(gzopen(path.c_str(), gzip ? "wb" : "wbT"));
  KDP_CHECK(f, IOError, "cannot create '{}': {}", path, describe_file_error(errno));
  KDP_CHECK(gzwrite(f.get(), bytes.data(), static_cast<unsigned>(bytes.size())) ==
                static_cast<int>(bytes.size()),
            IOError, "cannot write '{}': {}", path, gz_error(f.get()));
}

}  // namespace kdp::data
