#include <gtest/gtest.h>
#include <signal.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "io/hdf5.hpp"
#include "temp_dir.hpp"
#include "test_util.hpp"

using namespace kdp;
namespace fs = std::filesystem;

using kdp::test::TempDir;

namespace {

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

// n images of 4 x 3 whose pixels encode their index, and labels i % 10.
void write_small_idx(const TempDir& dir, int64_t n, bool gzip, std::string& images,
                     std::string& labels) {
  std::vector<uint8_t> img(static_cast<size_t>(n * 12)), lab(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < 12; ++p)
      img[static_cast<size_t>(i * 12 + p)] = static_cast<uint8_t>((i * 7 + p) % 256);
    lab[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 10);
  }
  images = dir.file(gzip ? "img.gz" : "img.idx");
  labels = dir.file(gzip ? "lab.gz" : "lab.idx");
  data::write_idx(images, {n, 4, 3}, img, gzip);
  data::write_idx(labels, {n}, lab, gzip);
}

}  // namespace

TEST(Idx, RoundTripThroughHDF5GzipAndPlain) {
  for (bool gzip : {true, false}) {
    TempDir dir;
    std::string images, labels;
    write_small_idx(dir, 50, gzip, images, labels);
    const auto idx = data::read_idx(images);
    EXPECT_EQ(idx.dims, (std::vector<int64_t>{50, 4, 3}));
    const std::string out = dir.file("out.h5");
    data::import_idx({{"train", images, labels}}, out, data::ImportOptions{});
    io::h5::File f = io::h5::File::open(out);
    EXPECT_EQ(f.open_dataset("/train/images").dims(), (std::vector<int64_t>{50, 4, 3}));
    EXPECT_EQ(f.open_dataset("/train/images").read_all<uint8_t>(), idx.data);
    EXPECT_EQ(f.open_dataset("/train/labels").read_all<uint8_t>(), data::read_idx(labels).data);
    EXPECT_EQ(f.open_group("train").attribute_int("num_classes"), 10);
    EXPECT_EQ(f.attribute_string("format"), "kdp-dataset");
  }
}

TEST(Idx, ImportingASecondSplitKeepsTheFirst) {
  TempDir dir;
  std::string images, labels;
  write_small_idx(dir, 20, true, images, labels);
  const std::string out = dir.file("out.h5");
  data::import_idx({{"train", images, labels}}, out, data::ImportOptions{});
  data::ImportOptions add;
  add.existing = data::ExistingOutput::AddSplits;
  data::import_idx({{"test", images, labels}}, out, add);
  io::h5::File f = io::h5::File::open(out);
  EXPECT_TRUE(f.exists("train/images"));
  EXPECT_TRUE(f.exists("test/images"));
}

TEST(Idx, RealFashionMnistHasTheKnownCounts) {
  TempDir dir;
  const std::string out = dir.file("fm.h5");
  data::import_fashion_mnist(out);
  for (const auto& [split, n] :
       {std::pair<std::string, int64_t>{"train", 60000}, {"test", 10000}}) {
    data::HDF5Dataset ds(out, split);
    EXPECT_EQ(ds.size(), n);
    EXPECT_EQ(ds.num_classes(), 10);
    EXPECT_EQ(ds.sample_shape(), Shape({28, 28}));
    io::h5::File f = io::h5::File::open(out);
    const auto labels = f.open_dataset("/" + split + "/labels").read_all<uint8_t>();
    std::vector<int64_t> counts(10, 0);
    for (uint8_t l : labels) counts[l]++;
    for (int64_t c : counts) EXPECT_EQ(c, n / 10) << split;  // Fashion-MNIST is balanced
  }
}

TEST(Idx, BadFilesAreReportedWithTheirName) {
  TempDir dir;
  std::string images, labels;
  write_small_idx(dir, 10, true, images, labels);
  auto expect_io_error = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      FAIL() << "expected IOError mentioning " << part;
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  // Missing file.
  expect_io_error([&] { data::read_idx(dir.file("nope.gz")); }, "nope.gz");
  // Wrong magic.
  const std::string bad_magic = dir.file("magic.idx");
  std::ofstream(bad_magic, std::ios::binary) << "PK\x03\x04 not an idx file";
  expect_io_error([&] { data::read_idx(bad_magic); }, "magic number");
  // Unsupported element type (0x0D float).
  const std::string float_idx = dir.file("float.idx");
  std::ofstream(float_idx, std::ios::binary).write("\x00\x00\x0D\x01\x00\x00\x00\x01xxxx", 12);
  expect_io_error([&] { data::read_idx(float_idx); }, "element type 0x0d");
  // Truncated gzip.
  const auto full = bytes_of(images);
  const std::string cut = dir.file("cut.gz");
  std::ofstream(cut, std::ios::binary)
      .write(reinterpret_cast<const char*>(full.data()), static_cast<long>(full.size() / 2));
  expect_io_error([&] { data::read_idx(cut); }, "cut.gz");
  // A header claiming 2^40 bytes is refused before anything is allocated.
  const std::string huge = dir.file("huge.idx");
  std::ofstream(huge, std::ios::binary)
      .write("\x00\x00\x08\x03\x00\x10\x00\x00\x00\x00\x10\x00\x00\x00\x10\x00", 16);
  expect_io_error([&] { data::read_idx(huge); }, "refusing");
  // Images and labels of different lengths.
  std::string images2, labels2;
  TempDir other;
  write_small_idx(other, 11, true, images2, labels2);
  expect_io_error(
      [&] {
        data::import_idx({{"train", images, labels2}}, dir.file("o.h5"), {});
      },
      "has 10 images but");
  // A label out of range for the class count.
  data::ImportOptions three;
  three.num_classes = 3;
  expect_io_error(
      [&] {
        data::import_idx({{"train", images, labels}}, dir.file("o.h5"), three);
      },
      "out of range for 3 classes");
  // Nothing half-written was left behind by the failures.
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.file("o.h5")));
}

TEST(Idx, InterruptedImportLeavesTheExistingOutputUntouched) {
  TempDir dir;
  std::string images, labels;
  write_small_idx(dir, 10, true, images, labels);
  const std::string out = dir.file("out.h5");
  data::import_idx({{"train", images, labels}}, out, data::ImportOptions{});
  const auto before = bytes_of(out);

  // Import the real Fashion-MNIST (seconds of work) and signal once it started.
  std::atomic<bool> stop_watching{false};
  std::thread signaller([&] {
    while (!stop_watching) {
      for (const auto& e : dir.entries()) {
        if (e.find(".tmp.") != std::string::npos) {
          ::kill(::getpid(), SIGTERM);
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  try {
    data::import_fashion_mnist(out, "", data::ExistingOutput::Overwrite);
    stop_watching = true;
    signaller.join();
    FAIL() << "the import was not interrupted";
  } catch (const IOError& e) {
    stop_watching = true;
    signaller.join();
    EXPECT_NE(std::string(e.what()).find("interrupted by signal"), std::string::npos) << e.what();
  }
  EXPECT_EQ(bytes_of(out), before);
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
}
