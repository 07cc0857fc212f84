#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "io/hdf5.hpp"
#include "temp_dir.hpp"
#include "test_util.hpp"

using namespace kdp;
namespace fs = std::filesystem;

namespace {

// Files under one directory for the whole run, removed when the binary exits,
// also where a test fails before its own clean-up.
std::string temp_file(const std::string& name) {
  static const kdp::test::TempDir dir;
  return dir.file(name);
}

// Values that deflate compresses but not to nothing: runs of random lengths.
template <class T>
std::vector<T> compressible(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<T> v(n);
  for (size_t i = 0; i < n;) {
    const T value = static_cast<T>(gen() % 200);
    for (size_t run = 1 + gen() % 9; run > 0 && i < n; --run) v[i++] = value;
  }
  return v;
}

// Every range the inflating read may be asked for: whole, inside one chunk,
// across chunk edges, the partial last chunk, empty.
const std::vector<std::pair<int64_t, int64_t>> kRanges = {{0, 1000}, {3, 500}, {63, 2}, {64, 64},
                                                          {960, 40}, {999, 1}, {0, 0},  {100, 1}};

template <class T>
void expect_same_as_hdf5(const io::h5::Dataset& d, int64_t row) {
  for (const auto& [start, count] : kRanges) {
    std::vector<T> want(static_cast<size_t>(count * row)), got(want.size(), T(77));
    d.read_rows<T>(start, count, want.data());
    for (int threads : {1, 2, 3}) {
      std::fill(got.begin(), got.end(), T(77));
      ASSERT_TRUE(d.read_rows_inflating<T>(start, count, got.data(), threads))
          << "rows [" << start << ", " << start + count << ")";
      EXPECT_EQ(got, want) << "rows [" << start << ", " << start + count << ") on " << threads
                           << " thread(s)";
    }
  }
}

}  // namespace

TEST(HDF5, InflatingReadsEqualHDF5sOwnRead) {
  const std::string path = temp_file("inflate.h5");
  {
    io::h5::File f = io::h5::File::create(path);
    // 1000 rows of 7x5 in chunks of 64 rows: the last chunk holds 40 rows.
    f.create_dataset("bytes", io::h5::Type::UInt8, {1000, 7, 5}, 64, 4)
        .write_all(compressible<uint8_t>(1000 * 35, 1).data());
    f.create_dataset("floats", io::h5::Type::Float32, {1000, 3}, 64, 6)
        .write_all(compressible<float>(1000 * 3, 2).data());
    // Chunked without a filter: the stored chunks are the values.
    f.create_dataset("plain", io::h5::Type::UInt8, {1000, 4}, 64, 0)
        .write_all(compressible<uint8_t>(1000 * 4, 3).data());
  }
  io::h5::File f = io::h5::File::open(path);
  expect_same_as_hdf5<uint8_t>(f.open_dataset("bytes"), 35);
  expect_same_as_hdf5<float>(f.open_dataset("floats"), 3);
  expect_same_as_hdf5<uint8_t>(f.open_dataset("plain"), 4);
  fs::remove(path);
}

TEST(HDF5, InflatingReadsLeaveOtherLayoutsToHDF5) {
  const std::string path = temp_file("layouts.h5");
  {
    io::h5::File f = io::h5::File::create(path);
    std::vector<float> v = compressible<float>(200, 4);
    f.create_dataset("contiguous", io::h5::Type::Float32, {100, 2}).write_all(v.data());
    f.create_dataset("stored_as_double", io::h5::Type::Float64, {100, 2}, 16, 4)
        .write_all(v.data());
    // Only the first of two chunks written: the second holds fill values.
    f.create_dataset("half_written", io::h5::Type::Float32, {100, 2}, 50, 4)
        .write_rows(0, 50, v.data());
  }
  io::h5::File f = io::h5::File::open(path);
  std::vector<float> out(200);
  EXPECT_FALSE(f.open_dataset("contiguous").read_rows_inflating<float>(0, 100, out.data(), 2));
  // Stored as float64, read as float: HDF5 converts, the chunks would not.
  EXPECT_FALSE(
      f.open_dataset("stored_as_double").read_rows_inflating<float>(0, 100, out.data(), 2));
  EXPECT_FALSE(f.open_dataset("half_written").read_rows_inflating<float>(0, 100, out.data(), 2));
  EXPECT_THROW(f.open_dataset("stored_as_double").read_rows_inflating<float>(90, 20, out.data(), 2),
               IOError);
  fs::remove(path);
}

TEST(HDF5, AChunkThatDoesNotInflateIsAnErrorNamingIt) {
  const std::string path = temp_file("corrupt-chunk.h5");
  {
    io::h5::File f = io::h5::File::create(path);
    f.create_dataset("bytes", io::h5::Type::UInt8, {256, 10}, 64, 4)
        .write_all(compressible<uint8_t>(2560, 5).data());
  }
  {
    // The chunk at row 64 replaced by bytes that are not a deflate stream.
    io::h5::File f = io::h5::File::open(path, io::h5::File::Mode::ReadWrite);
    io::h5::Dataset d = f.open_dataset("bytes");
    const std::vector<unsigned char> junk(100, 0xAB);
    const hsize_t offset[2] = {64, 0};
    ASSERT_GE(H5Dwrite_chunk(d.id(), H5P_DEFAULT, 0, offset, junk.size(), junk.data()), 0);
  }
  {
    io::h5::File f = io::h5::File::open(path);
    io::h5::Dataset d = f.open_dataset("bytes");
    std::vector<uint8_t> out(2560);
    EXPECT_TRUE(d.read_rows_inflating<uint8_t>(0, 64, out.data(), 2));  // before the bad chunk
    for (int threads : {1, 2, 4}) {
      try {
        d.read_rows_inflating<uint8_t>(0, 256, out.data(), threads);
        ADD_FAILURE() << "a corrupt chunk read without an error on " << threads << " thread(s)";
      } catch (const IOError& e) {
        EXPECT_NE(std::string(e.what()).find("chunk at row 64"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      }
    }
  }
  // The dataset reports it the same way on its first epoch.
  {
    io::h5::File w = io::h5::File::open(path, io::h5::File::Mode::ReadWrite);
    std::vector<uint8_t> labels(256, 1);
    w.create_group("train");
    w.open_group("train")
        .create_dataset("labels", io::h5::Type::UInt8, {256})
        .write_all(labels.data());
    H5Lmove(w.id(), "bytes", w.id(), "train/images", H5P_DEFAULT, H5P_DEFAULT);
  }
  data::HDF5DatasetOptions o;
  o.inflate_threads = 2;
  data::HDF5Dataset ds(path, "train", o);
  std::vector<float> features(10), label(1);
  EXPECT_THROW(ds.fetch({100}, features.data(), label.data()), IOError);
  fs::remove(path);
}
