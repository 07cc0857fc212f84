// The threaded reader of compressed chunks: Dataset::read_rows_inflating
// reads a range's chunks as stored (H5Dread_chunk) on the calling thread and
// inflates them on helper threads as they arrive, straight into the rows they
// hold, where HDF5 would inflate one chunk after another on one thread.
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/check.hpp"
#include "io/hdf5.hpp"
#include "io/hdf5_detail.hpp"
#include "kdp/core/error.hpp"

namespace kdp::io::h5 {

using detail::fail;
using detail::native_of;

template <class T>
bool Dataset::read_rows_inflating(int64_t start, int64_t count, T* out, int threads) const {
  silence_errors();
  const std::vector<int64_t> d = dims();
  if (d.empty()) return false;
  KDP_CHECK(start >= 0 && count >= 0 && start + count <= d[0], IOError,
            "rows [{}, {}) are outside '{}' ({} rows) in '{}'", start, start + count, path_, d[0],
            file_);
  Handle dcpl(H5Dget_create_plist(id()), H5Pclose);
  if (H5Pget_layout(dcpl.id()) != H5D_CHUNKED) return false;
  const int rank = static_cast<int>(d.size());
  std::vector<hsize_t> chunk(d.size());
  if (H5Pget_chunk(dcpl.id(), rank, chunk.data()) != rank || chunk[0] == 0) return false;
  for (size_t k = 1; k < d.size(); ++k) {
    if (chunk[k] != static_cast<hsize_t>(d[k])) return false;  // not whole rows
  }
  const int filters = H5Pget_nfilters(dcpl.id());
  if (filters < 0 || filters > 1) return false;
  bool deflated = false;
  if (filters == 1) {
    unsigned flags = 0, config = 0;
    size_t values = 0;
    if (H5Pget_filter2(dcpl.id(), 0, &flags, &values, nullptr, 0, nullptr, &config) !=
        H5Z_FILTER_DEFLATE) {
      return false;
    }
    deflated = true;
  }
  Handle type(H5Dget_type(id()), H5Tclose);
  if (H5Tequal(type.id(), native_of<T>()) <= 0) return false;
  if (count == 0) return true;

  // A chunk beyond 256 MiB (a corrupt header, or an unusual file) is left to HDF5.
  constexpr auto kMaxChunk = static_cast<unsigned __int128>(256) << 20;
  unsigned __int128 bytes = sizeof(T) * static_cast<unsigned __int128>(chunk[0]);
  for (size_t k = 1; k < d.size() && bytes <= kMaxChunk; ++k) bytes *= chunk[k];
  if (bytes == 0 || bytes > kMaxChunk) return false;
  const auto chunk_rows = static_cast<int64_t>(chunk[0]);
  const auto chunk_bytes = static_cast<size_t>(bytes);
  const size_t row_bytes = chunk_bytes / static_cast<size_t>(chunk_rows);
  const int64_t first = start / chunk_rows;
  const size_t n = static_cast<size_t>((start + count - 1) / chunk_rows - first + 1);
  // So many chunks at once (rows of a few bytes each) are left to HDF5 too: the
  // bookkeeping here is some 40 bytes a chunk.
  if (n > (size_t{1} << 20)) return false;
  auto row_of = [&](size_t i) { return (first + static_cast<int64_t>(i)) * chunk_rows; };
  // HDF5 addresses a chunk by the coordinates of its first element.
  auto offset_of = [&](size_t i) {
    std::vector<hsize_t> offset(d.size(), 0);
    offset[0] = static_cast<hsize_t>(row_of(i));
    return offset;
  };
  // Every chunk's stored size, checked before anything is allocated for it: a
  // range with an unwritten chunk (fill values) is left to HDF5's own read.
  const size_t bound =
      std::max<size_t>(chunk_bytes, compressBound(static_cast<uLong>(chunk_bytes)));
  std::vector<hsize_t> stored(n);
  for (size_t i = 0; i < n; ++i) {
    if (H5Dget_chunk_storage_size(id(), offset_of(i).data(), &stored[i]) < 0 || stored[i] == 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    KDP_CHECK(stored[i] <= bound, IOError,
              "the chunk at row {} of '{}' in '{}' stores {} bytes for {} bytes of data; "
              "the file is corrupt",
              row_of(i), path_, file_, static_cast<uint64_t>(stored[i]), chunk_bytes);
  }

  struct Piece {
    std::vector<unsigned char> bytes;
    uint32_t mask = 0;
  };
  std::vector<Piece> pieces(n);
  std::mutex mutex;
  std::condition_variable arrived;
  size_t read = 0;  // chunks read so far (guarded by mutex)
  bool failed = false;
  std::exception_ptr error;
  std::atomic<size_t> next{0};

  // Chunk i into its rows of `out` (straight in when the chunk lies inside the
  // range, else through a chunk-sized buffer).
  auto inflate = [&](size_t i) {
    const Piece& p = pieces[i];
    const int64_t row0 = row_of(i);
    const int64_t from = std::max(row0, start), to = std::min(row0 + chunk_rows, start + count);
    unsigned char* dst =
        reinterpret_cast<unsigned char*>(out) + static_cast<size_t>(from - start) * row_bytes;
    const bool whole = from == row0 && to == row0 + chunk_rows;
    std::vector<unsigned char> scratch;
    unsigned char* target = dst;
    if (!whole) {
      scratch.resize(chunk_bytes);
      target = scratch.data();
    }
    bool ok = false;
    if (deflated && (p.mask & 1u) == 0) {
      uLongf produced = static_cast<uLongf>(chunk_bytes);
      ok = uncompress(target, &produced, p.bytes.data(), static_cast<uLong>(p.bytes.size())) ==
               Z_OK &&
           produced == chunk_bytes;
    } else if (p.bytes.size() == chunk_bytes) {
      std::memcpy(target, p.bytes.data(), chunk_bytes);
      ok = true;
    }
    KDP_CHECK(ok, IOError,
              "the chunk at row {} of '{}' in '{}' does not inflate to its {} bytes; the "
              "file is corrupt",
              row0, path_, file_, chunk_bytes);
    if (!whole) {
      std::memcpy(dst, scratch.data() + static_cast<size_t>(from - row0) * row_bytes,
                  static_cast<size_t>(to - from) * row_bytes);
    }
  };
  // Called in a catch block: the first error wins, and everyone stops.
  auto give_up = [&] {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = std::current_exception();
    failed = true;
    arrived.notify_all();
  };
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        arrived.wait(lock, [&] { return read > i || failed; });
        if (failed) return;
      }
      try {
        inflate(i);
        std::vector<unsigned char>().swap(pieces[i].bytes);
      } catch (...) {
        give_up();
        return;
      }
    }
  };

  // A thread of its own pays for itself from a few chunks on.
  const size_t helpers = std::min<size_t>(static_cast<size_t>(std::max(threads, 1)) - 1, n / 4);
  std::vector<std::thread> workers;
  try {
    for (size_t t = 0; t < helpers; ++t) workers.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started and this one do the work.
  }
  for (size_t i = 0; i < n; ++i) {
    try {
      pieces[i].bytes.resize(static_cast<size_t>(stored[i]));
      if (H5Dread_chunk(id(), H5P_DEFAULT, offset_of(i).data(), &pieces[i].mask,
                        pieces[i].bytes.data()) < 0) {
        fail(fmt::format("read the chunk at row {} of", row_of(i)), path_, file_);
      }
    } catch (...) {
      give_up();
      break;
    }
    std::lock_guard<std::mutex> lock(mutex);
    read = i + 1;
    arrived.notify_all();
    if (failed) break;
  }
  work();  // the calling thread inflates too once everything is read
  for (std::thread& w : workers) w.join();
  if (error) std::rethrow_exception(error);
  return true;
}

template bool Dataset::read_rows_inflating<uint8_t>(int64_t, int64_t, uint8_t*, int) const;
template bool Dataset::read_rows_inflating<int64_t>(int64_t, int64_t, int64_t*, int) const;
template bool Dataset::read_rows_inflating<float>(int64_t, int64_t, float*, int) const;
template bool Dataset::read_rows_inflating<double>(int64_t, int64_t, double*, int) const;
template bool Dataset::read_rows_inflating<int8_t>(int64_t, int64_t, int8_t*, int) const;
template bool Dataset::read_rows_inflating<uint16_t>(int64_t, int64_t, uint16_t*, int) const;
template bool Dataset::read_rows_inflating<int16_t>(int64_t, int64_t, int16_t*, int) const;
template bool Dataset::read_rows_inflating<uint32_t>(int64_t, int64_t, uint32_t*, int) const;
template bool Dataset::read_rows_inflating<int32_t>(int64_t, int64_t, int32_t*, int) const;
template bool Dataset::read_rows_inflating<Half>(int64_t, int64_t, Half*, int) const;

}  // namespace kdp::io::h5
