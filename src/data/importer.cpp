#include "kdp/data/importer.hpp"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "core/check.hpp"
#include "importer_detail.hpp"
#include "io/hdf5.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"
#include "kdp/core/stop_signal.hpp"
#include "kdp/data/idx.hpp"
#include "kdp/io/atomic_file.hpp"
#include "kdp/io/output_file.hpp"

namespace kdp::data {

namespace fs = std::filesystem;

namespace {

void check_interrupted(const std::string& out) {
  detail::check_interrupted(out);
}

void write_split(io::h5::File& file, const SplitSource& src, const ImportOptions& options,
                 const std::string& out) {
  const IdxArray images = read_idx(src.images);
  check_interrupted(out);
  const IdxArray labels = read_idx(src.labels);
  KDP_CHECK(images.dims.size() >= 2, IOError,
            "'{}' holds a {}-dimensional array; images need a sample "
            "dimension and at least one more",
            src.images, images.dims.size());
  KDP_CHECK(labels.dims.size() == 1, IOError,
            "'{}' holds a {}-dimensional array; labels must be one "
            "number per sample",
            src.labels, labels.dims.size());
  KDP_CHECK(images.count() != 0, IOError, "'{}' holds no samples (its dimensions are [{}])",
            src.images, fmt::join(images.dims, ", "));
  KDP_CHECK(!images.data.empty(), IOError, "'{}' holds samples of size 0 (its dimensions are [{}])",
            src.images, fmt::join(images.dims, ", "));
  KDP_CHECK(images.count() == labels.count(), IOError, "'{}' has {} images but '{}' has {} labels",
            src.images, images.count(), src.labels, labels.count());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    KDP_CHECK(labels.data[i] < options.num_classes, IOError,
              "label {} of sample {} in '{}' is out of range for {} "
              "classes",
              labels.data[i], i, src.labels, options.num_classes);
  }
  if (file.exists(src.split)) H5Ldelete(file.id(), src.split.c_str(), H5P_DEFAULT);  // Overwrite
  io::h5::Group group = file.create_group(src.split);
  io::h5::Dataset img = group.create_dataset("images", io::h5::Type::UInt8, images.dims,
                                             options.chunk_rows, options.deflate);
  const int64_t row =
      static_cast<int64_t>(images.data.size()) / std::max<int64_t>(1, images.count());
  for (int64_t start = 0; start < images.count(); start += 4096) {
    const int64_t n = std::min<int64_t>(4096, images.count() - start);
    img.write_rows(start, n, images.data.data() + start * row);
    check_interrupted(out);
  }
  io::h5::Dataset lab =
      group.create_dataset("labels", io::h5::Type::UInt8, labels.dims, options.chunk_rows, 0);
  lab.write_all(labels.data.data());

  std::vector<std::string> names = options.class_names;
  for (int64_t c = static_cast<int64_t>(names.size()); c < options.num_classes; ++c) {
    names.push_back(std::to_string(c));
  }
  group.set_attribute("source_images", fs::absolute(src.images).string());
  group.set_attribute("source_labels", fs::absolute(src.labels).string());
  group.set_attribute("num_classes", options.num_classes);
  group.set_attribute("class_names", names);
}

// Whether the existing kdp dataset `out` may be written as `options` ask:
// AddSplits for splits it lacks, Overwrite for those it has.
void check_existing_splits(const std::string& out, const std::vector<std::string>& splits,
                           const ImportOptions& options) {
  const io::h5::File file = io::h5::File::open(out);
  for (const std::string& split : splits) {
    const bool has = file.exists(split);
    KDP_CHECK(options.existing != ExistingOutput::Refuse || has, IOError,
              "'{}' exists; --add-split adds the '{}' split to it", out, split);
    KDP_CHECK(options.existing == ExistingOutput::Overwrite || !has, IOError,
              "'{}' already has a '{}' split; --overwrite replaces it", out, split);
  }
}

// The bytes free for writing on the file system that holds `path` (or its directory).
uint64_t free_space(const std::string& path) {
  struct statvfs st {};
  const fs::path p(path);
  if (::statvfs(p.has_parent_path() ? p.parent_path().c_str() : ".", &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

// Copies `from` into `to` with the system's reason on failure (a full disk).
void copy_contents(const std::string& from, const std::string& to, const std::string& out) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  KDP_CHECK(!ec, IOError,
            "cannot write '{}': copying it to keep its other splits "
            "failed: {}; '{}' is left as it was",
            out, describe_file_error(ec.value()), out);
}

}  // namespace

namespace detail {

void import_splits(const std::vector<std::string>& splits, const std::string& out,
                   const ImportOptions& options, const std::function<void(io::h5::File&)>& write) {
  KDP_CHECK(!splits.empty(), ValueError, "no splits to import");
  for (const std::string& split : splits) {
    KDP_CHECK(!split.empty() && split.find('/') == std::string::npos, ValueError,
              "split name '{}' must be non-empty and "
              "without '/'",
              split);
  }
  // Only a kdp dataset is written into; what the user asked of it is decided
  // split by split.
  const bool exists =
      io::claim_output(out, io::OutputKind::dataset(), /*replace=*/true, "kdp::data");
  if (exists) check_existing_splits(out, splits, options);
  StopSignal stop;  // SIGINT/SIGTERM abandon the temporary file, not the old output
  if (stop.outermost()) StopSignal::clear();
  io::AtomicFile target(out);
  try {
    io::h5::File file = [&] {
      if (exists) {  // keep the other splits: start from a copy of the existing file
        copy_contents(out, target.temp_path(), out);
        return io::h5::File::open(target.temp_path(), io::h5::File::Mode::ReadWrite);
      }
      return io::h5::File::create(target.temp_path());
    }();
    write(file);
    file.set_attribute("format", "kdp-dataset");
    file.set_attribute("format_version", int64_t{1});
    file.set_attribute("dataset", options.dataset);
    file.flush();
    file.close();
    check_interrupted(out);
    target.commit();
  } catch (const IOError& e) {
    std::string what = e.what();
    if (what.find(target.temp_path()) == std::string::npos) throw;  // not a write that failed
    // libhdf5 does not say why a write failed; a full disk is the common reason.
    const uint64_t free_bytes = free_space(target.temp_path());
    if (free_bytes < (uint64_t{1} << 20)) {
      what = fmt::format("kdp::data: cannot write '{}': no space left on the device ({} free)", out,
                         format_bytes(static_cast<double>(free_bytes)));
    } else {  // name the output, not the temporary file
      const std::string temp = target.temp_path();
      for (size_t at = what.find(temp); at != std::string::npos; at = what.find(temp, at)) {
        what.replace(at, temp.size(), out);
      }
    }
    // The writer's error (with its origin) and what became of the output.
    throw IOError(fmt::format("{}; the import was abandoned and '{}' is {}", what, out,
                              exists ? "left as it was" : "not written"));
  }
}

void check_interrupted(const std::string& out) {
  KDP_CHECK(!StopSignal::requested(), IOError,
            "import into '{}' interrupted by signal {}; '{}' is left "
            "as it was",
            out, StopSignal::signal(), out);
}

}  // namespace detail

void import_idx(const std::vector<SplitSource>& splits, const std::string& out,
                const ImportOptions& options) {
  std::vector<std::string> names;
  for (const SplitSource& s : splits) names.push_back(s.split);
  detail::import_splits(names, out, options, [&](io::h5::File& file) {
    for (const auto& s : splits) write_split(file, s, options, out);
  });
}

std::string find_fashion_mnist() {
  const char* env = std::getenv("KDP_FASHION_MNIST_DIR");
  const std::string dir =
      env != nullptr && *env != '\0' ? env : "/usr/share/datasets/fashion-mnist";
  KDP_CHECK(fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz"), IOError,
            "Fashion-MNIST not found in '{}' (install Debian's dataset-fashion-mnist or set "
            "KDP_FASHION_MNIST_DIR)",
            dir);
  return dir;
}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                 "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

void import_fashion_mnist(const std::string& out, const std::string& dir_in,
                          ExistingOutput existing) {
  const std::string dir = dir_in.empty() ? find_fashion_mnist() : dir_in;
  const fs::path d(dir);
  ImportOptions options;
  options.existing = existing;
  options.dataset = "fashion-mnist";
  options.class_names = fashion_mnist_classes();
  import_idx({{"train", (d / "train-images-idx3-ubyte.gz").string(),
               (d / "train-labels-idx1-ubyte.gz").string()},
              {"test", (d / "t10k-images-idx3-ubyte.gz").string(),
               (d / "t10k-labels-idx1-ubyte.gz").string()}},
             out, options);
}

}  // namespace kdp::data
