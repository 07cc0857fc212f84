#pragma once
/// \file
/// Imports IDX files (Fashion-MNIST as Debian ships it) into kdp's HDF5 dataset
/// layout:
///
///   /<split>/images  uint8 [N, H, W]  chunked, deflate-compressed
///   /<split>/labels  uint8 [N]
///   attributes of /<split>: source_images, source_labels, num_classes, class_names
///   attributes of /: format = "kdp-dataset", format_version, dataset
///
/// The output is written to a temporary file and renamed into place when
/// complete: an interrupted import never leaves a file that looks complete and
/// never destroys an existing one. An existing output is written only when
/// asked (ImportOptions::existing) and only when it is a kdp dataset; its
/// other splits are kept. A file of any other kind (a checkpoint, a user's own
/// HDF5 file) is never written into.

#include <string>
#include <utility>
#include <vector>

namespace kdp::data {

/// The IDX files of one split.
struct SplitSource {
  std::string split;   // "train" or "test"
  std::string images;  // IDX path (gzip or plain)
  std::string labels;
};

/// What an import does with an output file that exists.
enum class ExistingOutput {
  Refuse,     // an error naming the two ways below
  AddSplits,  // adds the splits it lacks; a split it has is an error
  Overwrite,  // replaces the imported splits (the others are kept)
};

/// Dataset name, class count and names, chunking and compression of an import.
struct ImportOptions {
  ExistingOutput existing = ExistingOutput::Refuse;
  std::string dataset = "unnamed";
  int64_t num_classes = 10;
  std::vector<std::string> class_names;  // empty: "0", "1", ...
  /// Rows per HDF5 chunk and deflate level (0: no compression).
  int64_t chunk_rows = 128;
  int deflate = 4;

  /// Chained setters, one per option, to name each where it is set:
  /// ImportOptions{}.with_existing(...).with_deflate(...).
  ImportOptions& with_existing(ExistingOutput value) {
    existing = std::move(value);
    return *this;
  }
  ImportOptions& with_dataset(std::string value) {
    dataset = std::move(value);
    return *this;
  }
  ImportOptions& with_num_classes(int64_t value) {
    num_classes = value;
    return *this;
  }
  ImportOptions& with_class_names(std::vector<std::string> value) {
    class_names = std::move(value);
    return *this;
  }
  ImportOptions& with_chunk_rows(int64_t value) {
    chunk_rows = value;
    return *this;
  }
  ImportOptions& with_deflate(int value) {
    deflate = value;
    return *this;
  }
};

/// Imports the splits into `out`. Throws IOError naming the file at fault (bad
/// IDX files, images and labels of different lengths, a label out of range for
/// num_classes, an IDX file without samples, an existing output that may not
/// be written (see ExistingOutput) or is not a kdp dataset, an unwritable
/// output or a full disk, SIGINT/SIGTERM during the import).
void import_idx(const std::vector<SplitSource>& splits, const std::string& out,
                const ImportOptions& options);

/// The numpy arrays of one split: .npy files, or members of .npz archives
/// ("arrays.npz:x" names x.npy in arrays.npz; np.savez and
/// np.savez_compressed both write them).
struct NpySource {
  std::string split;    // "train" or "test"
  std::string inputs;   // [N, ...] numbers
  std::string targets;  // [N] integer classes, or floats [N, ...] (a regression)
};

/// Imports the arrays into `out` as /<split>/images and /<split>/labels,
/// streaming them in blocks: uint8 inputs as bytes, 32-bit integers and
/// float64 as float64, the other numbers as float32 (each exactly); integer
/// targets as int64 classes (num_classes of the options, or 0: the largest +
/// 1), float targets as float32 or float64. The same rules as import_idx for
/// the output; IOError naming the file for an array it cannot read (not
/// numbers, Fortran order), 64-bit integer inputs, targets whose count differs
/// from the inputs', non-finite values or a label out of range (naming the
/// sample).
void import_npy(const std::vector<NpySource>& splits, const std::string& out,
                const ImportOptions& options);

/// The directory holding Fashion-MNIST's IDX files: $KDP_FASHION_MNIST_DIR or
/// Debian's /usr/share/datasets/fashion-mnist. Throws IOError when absent.
std::string find_fashion_mnist();

/// Imports both splits of Fashion-MNIST from `dir` (find_fashion_mnist() when
/// empty); an existing `out` is treated as `existing` says.
void import_fashion_mnist(const std::string& out, const std::string& dir = "",
                          ExistingOutput existing = ExistingOutput::Refuse);

/// Fashion-MNIST's ten class names.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace kdp::data
