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
#include <optional>
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

namespace {

// How a dataset's chunks are laid out, where kdp can read them itself: whole
// rows each, stored as they are or deflated.
struct ChunkLayout {
  std::vector<hsize_t> chunk;  // a chunk's extent in every dimension
  bool deflated = false;
};

// The chunks that hold rows [start, start + count): chunk i holds rows
// [row_of(i), row_of(i) + chunk_rows) and stores stored[i] bytes.
struct ChunkPlan {
  int64_t start = 0, count = 0;
  int64_t chunk_rows = 0, first = 0;
  size_t chunks = 0, chunk_bytes = 0, row_bytes = 0, dims = 0;
  bool deflated = false;
  std::vector<hsize_t> stored;

  int64_t row_of(size_t i) const { return (first + static_cast<int64_t>(i)) * chunk_rows; }
  // HDF5 addresses a chunk by the coordinates of its first element.
  std::vector<hsize_t> offset_of(size_t i) const {
    std::vector<hsize_t> offset(dims, 0);
    offset[0] = static_cast<hsize_t>(row_of(i));
    return offset;
  }
};

// One chunk as read: its bytes and the filters it skipped.
struct Piece {
  std::vector<unsigned char> bytes;
  uint32_t mask = 0;
};

// The layout of a chunked dataset of whole-row chunks, deflated or not, of
// the memory type `native`; nothing where HDF5's own read must do.
std::optional<ChunkLayout> inflatable_layout(hid_t dataset, const std::vector<int64_t>& d,
                                             hid_t native) {
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (H5Pget_layout(dcpl.id()) != H5D_CHUNKED) return std::nullopt;
  const int rank = static_cast<int>(d.size());
  ChunkLayout layout;
  layout.chunk.resize(d.size());
  if (H5Pget_chunk(dcpl.id(), rank, layout.chunk.data()) != rank || layout.chunk[0] == 0) {
    return std::nullopt;
  }
  for (size_t k = 1; k < d.size(); ++k) {
    if (layout.chunk[k] != static_cast<hsize_t>(d[k])) return std::nullopt;  // not whole rows
  }
  const int filters = H5Pget_nfilters(dcpl.id());
  if (filters < 0 || filters > 1) return std::nullopt;
  if (filters == 1) {
    unsigned flags = 0, config = 0;
    size_t values = 0;
    if (H5Pget_filter2(dcpl.id(), 0, &flags, &values, nullptr, 0, nullptr, &config) !=
        H5Z_FILTER_DEFLATE) {
      return std::nullopt;
    }
    layout.deflated = true;
  }
  Handle type(H5Dget_type(dataset), H5Tclose);
  if (H5Tequal(type.id(), native) <= 0) return std::nullopt;
  return layout;
}

// The plan for rows [start, start + count) of items of `item_bytes`, every
// chunk's stored size checked before anything is allocated for it; nothing
// where HDF5's own read must do (huge or unwritten chunks, too many of them).
std::optional<ChunkPlan> plan_chunks(const Dataset& dataset, const ChunkLayout& layout,
                                     size_t item_bytes, int64_t start, int64_t count) {
  // A chunk beyond 256 MiB (a corrupt header, or an unusual file) is left to HDF5.
  constexpr auto kMaxChunk = static_cast<unsigned __int128>(256) << 20;
  unsigned __int128 bytes = item_bytes * static_cast<unsigned __int128>(layout.chunk[0]);
  for (size_t k = 1; k < layout.chunk.size() && bytes <= kMaxChunk; ++k) bytes *= layout.chunk[k];
  if (bytes == 0 || bytes > kMaxChunk) return std::nullopt;
  ChunkPlan plan;
  plan.start = start;
  plan.count = count;
  plan.chunk_rows = static_cast<int64_t>(layout.chunk[0]);
  plan.chunk_bytes = static_cast<size_t>(bytes);
  plan.row_bytes = plan.chunk_bytes / static_cast<size_t>(plan.chunk_rows);
  plan.first = start / plan.chunk_rows;
  plan.chunks = static_cast<size_t>((start + count - 1) / plan.chunk_rows - plan.first + 1);
  plan.dims = layout.chunk.size();
  plan.deflated = layout.deflated;
  // So many chunks at once (rows of a few bytes each) are left to HDF5 too: the
  // bookkeeping here is some 40 bytes a chunk.
  if (plan.chunks > (size_t{1} << 20)) return std::nullopt;
  const size_t bound =
      std::max<size_t>(plan.chunk_bytes, compressBound(static_cast<uLong>(plan.chunk_bytes)));
  plan.stored.resize(plan.chunks);
  for (size_t i = 0; i < plan.chunks; ++i) {
    if (H5Dget_chunk_storage_size(dataset.id(), plan.offset_of(i).data(), &plan.stored[i]) < 0 ||
        plan.stored[i] == 0) {
      H5Eclear2(H5E_DEFAULT);  // an unwritten chunk (fill values)
      return std::nullopt;
    }
    KDP_CHECK(plan.stored[i] <= bound, IOError,
              "the chunk at row {} of '{}' in '{}' stores {} bytes for {} bytes of data; "
              "the file is corrupt",
              plan.row_of(i), dataset.path(), dataset.file(), static_cast<uint64_t>(plan.stored[i]),
              plan.chunk_bytes);
  }
  return plan;
}

// Chunk i's piece into its rows of `out` (the range's first row at out):
// straight in when the chunk lies inside the range, else through a
// chunk-sized buffer whose rows in the range are copied out.
void inflate_chunk(const Dataset& dataset, const ChunkPlan& plan, size_t i, const Piece& p,
                   unsigned char* out) {
  const int64_t row0 = plan.row_of(i);
  const int64_t from = std::max(row0, plan.start);
  const int64_t to = std::min(row0 + plan.chunk_rows, plan.start + plan.count);
  unsigned char* dst = out + static_cast<size_t>(from - plan.start) * plan.row_bytes;
  const bool whole = from == row0 && to == row0 + plan.chunk_rows;
  std::vector<unsigned char> scratch;
  unsigned char* target = dst;
  if (!whole) {
    scratch.resize(plan.chunk_bytes);
    target = scratch.data();
  }
  bool ok = false;
  if (plan.deflated && (p.mask & 1u) == 0) {
    uLongf produced = static_cast<uLongf>(plan.chunk_bytes);
    ok =
        uncompress(target, &produced, p.bytes.data(), static_cast<uLong>(p.bytes.size())) == Z_OK &&
        produced == plan.chunk_bytes;
  } else if (p.bytes.size() == plan.chunk_bytes) {
    std::memcpy(target, p.bytes.data(), plan.chunk_bytes);
    ok = true;
  }
  KDP_CHECK(ok, IOError,
            "the chunk at row {} of '{}' in '{}' does not inflate to its {} bytes; the "
            "file is corrupt",
            row0, dataset.path(), dataset.file(), plan.chunk_bytes);
  if (!whole) {
    std::memcpy(dst, scratch.data() + static_cast<size_t>(from - row0) * plan.row_bytes,
                static_cast<size_t>(to - from) * plan.row_bytes);
  }
}

// Reads the plan's chunks as stored on the calling thread and inflates them
// on helper threads as they arrive (the caller joins in once all are read);
// the first error stops everyone and is rethrown.
class InflatePipeline {
 public:
  InflatePipeline(const Dataset& dataset, const ChunkPlan& plan, unsigned char* out)
      : dataset_(dataset), plan_(plan), out_(out), pieces_(plan.chunks) {}

  void run(int threads) {
    // A thread of its own pays for itself from a few chunks on.
    const size_t helpers =
        std::min<size_t>(static_cast<size_t>(std::max(threads, 1)) - 1, plan_.chunks / 4);
    std::vector<std::thread> workers;
    try {
      for (size_t t = 0; t < helpers; ++t) workers.emplace_back([this] { inflate_arrived(); });
    } catch (const std::system_error&) {
      // No more threads to be had: the ones started and this one do the work.
    }
    read_all();
    inflate_arrived();  // the calling thread inflates too once everything is read
    for (std::thread& w : workers) w.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void read_all() {
    for (size_t i = 0; i < plan_.chunks; ++i) {
      try {
        Piece& p = pieces_[i];
        p.bytes.resize(static_cast<size_t>(plan_.stored[i]));
        if (H5Dread_chunk(dataset_.id(), H5P_DEFAULT, plan_.offset_of(i).data(), &p.mask,
                          p.bytes.data()) < 0) {
          fail(fmt::format("read the chunk at row {} of", plan_.row_of(i)), dataset_.path(),
               dataset_.file());
        }
      } catch (...) {
        give_up();
        return;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      read_ = i + 1;
      arrived_.notify_all();
      if (failed_) return;
    }
  }

  // Takes the next chunk not yet taken, waits for it to be read, inflates it.
  void inflate_arrived() {
    for (size_t i = next_.fetch_add(1); i < plan_.chunks; i = next_.fetch_add(1)) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        arrived_.wait(lock, [&] { return read_ > i || failed_; });
        if (failed_) return;
      }
      try {
        inflate_chunk(dataset_, plan_, i, pieces_[i], out_);
        std::vector<unsigned char>().swap(pieces_[i].bytes);
      } catch (...) {
        give_up();
        return;
      }
    }
  }

  // Called in a catch block: the first error wins, and everyone stops.
  void give_up() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
    failed_ = true;
    arrived_.notify_all();
  }

  const Dataset& dataset_;
  const ChunkPlan& plan_;
  unsigned char* out_;
  std::vector<Piece> pieces_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  size_t read_ = 0;  // chunks read so far (guarded by mutex_)
  bool failed_ = false;
  std::exception_ptr error_;
  std::atomic<size_t> next_{0};
};

}  // namespace

template <class T>
bool Dataset::read_rows_inflating(int64_t start, int64_t count, T* out, int threads) const {
  silence_errors();
  const std::vector<int64_t> d = dims();
  if (d.empty()) return false;
  KDP_CHECK(start >= 0 && count >= 0 && start + count <= d[0], IOError,
            "rows [{}, {}) are outside '{}' ({} rows) in '{}'", start, start + count, path_, d[0],
            file_);
  const std::optional<ChunkLayout> layout = inflatable_layout(id(), d, native_of<T>());
  if (!layout) return false;
  if (count == 0) return true;
  const std::optional<ChunkPlan> plan = plan_chunks(*this, *layout, sizeof(T), start, count);
  if (!plan) return false;
  InflatePipeline(*this, *plan, reinterpret_cast<unsigned char*>(out)).run(threads);
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
