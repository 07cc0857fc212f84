#pragma once
/// \file
/// Imports IDX files (Fashion-MNIST as Debian ships it), numpy arrays and text
/// (import_text, whose layout is described there) into kdp's HDF5 dataset
/// layout; IDX files as:
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

#include <cstdint>
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

/// How import_text turns text into tokens.
enum class Tokenizer {
  Bytes,  // each byte of the UTF-8 text is a token, 0..255
  Chars,  // each distinct code point is a token, numbered in ascending code point order
};

/// The windows import_text cuts from a text.
struct TextOptions {
  /// N: each row holds N + 1 tokens, a model's N inputs and their N
  /// next-token targets; consecutive rows share one token.
  int64_t context = 256;
  Tokenizer tokenizer = Tokenizer::Bytes;
  /// The share of the text's tokens, taken from its end, held out as /test.
  double test_fraction = 0.1;

  /// Chained setters: TextOptions{}.with_context(128).with_tokenizer(...).
  TextOptions& with_context(int64_t value) {
    context = value;
    return *this;
  }
  TextOptions& with_tokenizer(Tokenizer value) {
    tokenizer = value;
    return *this;
  }
  TextOptions& with_test_fraction(double value) {
    test_fraction = value;
    return *this;
  }
};

/// What import_text wrote.
struct ImportedText {
  int64_t tokens = 0;      // of the whole text
  int64_t vocab_size = 0;  // 256 for bytes, the distinct characters for chars
  int64_t train_rows = 0;
  int64_t test_rows = 0;
};

/// Imports text files (UTF-8, in the order given, as one text) as windows of
/// tokens for next-token prediction, streaming them in blocks (a file is never
/// held in memory, whatever its line lengths):
///
///   /<split>/tokens  [rows, N + 1]  uint8 (bytes, or at most 256 distinct
///                    characters) or uint16 (up to 65536); chunked by rows,
///                    deflate-compressed. Row r holds tokens [rN, rN + N] of
///                    the split: every token but the split's first is a
///                    target once, and a tail shorter than a window is dropped.
///   /vocab           uint32 [vocab_size], chars only: the code point of each
///                    token id, ascending.
///   attributes of /train and /test: context (N), vocab_size, tokenizer
///                    ("bytes" or "chars"), source_texts (the files' absolute
///                    paths), first_token and text_tokens (where the split
///                    starts in the text's tokens, and how many it has).
///   attributes of /: format = "kdp-dataset", format_version, dataset.
///
/// /test is the last round(test_fraction * tokens) tokens, /train the rest.
/// The same rules as import_idx for the output (the splits, their attributes
/// and /vocab are replaced on ExistingOutput::Overwrite). ValueError for a
/// context below 1, a test fraction outside (0, 1) or no files; IOError naming
/// the file for one that cannot be read, is not UTF-8 (with the byte offset) or
/// holds a NUL byte (a binary file, with the offset), an input without tokens,
/// a split shorter than one window (naming the token count and the context),
/// more than 65536 distinct characters for Tokenizer::Chars.
ImportedText import_text(const std::vector<std::string>& files, const std::string& out,
                         const TextOptions& text, const ImportOptions& options = {});

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
