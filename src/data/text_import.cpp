// kdp-data import-text: text files as windows of tokens for next-token
// prediction, read and written block by block (include/kdp/data/importer.hpp
// describes the layout).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/check.hpp"
#include "importer_detail.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"
#include "kdp/data/importer.hpp"
#include "utf8_decoder.hpp"

namespace kdp::data {

namespace fs = std::filesystem;

namespace {

constexpr size_t kReadBytes = size_t{1} << 20;     // read from a file at a time
constexpr int64_t kChunkBytes = int64_t{1} << 20;  // a chunk fits HDF5's default chunk cache
constexpr int64_t kWriteBytes = int64_t{4} << 20;  // rows written at a time, about
constexpr size_t kCodePoints = 0x110000;
constexpr size_t kMaxChars = 65536;  // ids of uint16

// The files as a message names them: "'a.txt'", "'a.txt', 'b.txt'", ...
std::string describe_files(const std::vector<std::string>& files) {
  if (files.size() <= 3) return fmt::format("'{}'", fmt::join(files, "', '"));
  return fmt::format("'{}', '{}' and {} more files", files[0], files[1], files.size() - 2);
}

const char* tokenizer_name(Tokenizer tokenizer) {
  switch (tokenizer) {
    case Tokenizer::Bytes:
      return "bytes";
    case Tokenizer::Chars:
      return "chars";
  }
  return "?";
}

// A text file open for reading, closed when done.
class TextFile {
 public:
  explicit TextFile(const std::string& path) : path_(path) {
    require_regular_file(path, "kdp::data", "text file ");  // a FIFO would block fopen
    file_.reset(std::fopen(path.c_str(), "rb"));
    KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_text"), file_ != nullptr, IOError,
                  "cannot open text file '{}': {}", path, describe_file_error(errno));
  }
  // Up to n bytes; 0 at the end of the file.
  size_t read(unsigned char* out, size_t n) {
    const size_t got = std::fread(out, 1, n, file_.get());
    KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_text"), got == n || std::ferror(file_.get()) == 0,
                  IOError, "cannot read text file '{}': {}", path_, describe_file_error(errno));
    return got;
  }

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Close> file_;
};

// Reads `files` in order, a block at a time, as UTF-8 text: on_char(code
// point) for each character of a block, then on_block(bytes, n). IOError for
// a file that cannot be read or is not text; a stop signal ends it between
// blocks.
template <class OnChar, class OnBlock>
void scan_text(const std::vector<std::string>& files, const std::string& out, OnChar&& on_char,
               OnBlock&& on_block) {
  std::vector<unsigned char> block(kReadBytes);
  for (const std::string& path : files) {
    TextFile file(path);
    detail::Utf8Decoder utf8(path);
    int64_t offset = 0;
    for (size_t n = file.read(block.data(), block.size()); n > 0;
         n = file.read(block.data(), block.size())) {
      utf8.decode(block.data(), n, offset, on_char);
      on_block(block.data(), n);
      offset += static_cast<int64_t>(n);
      detail::check_interrupted(out);
    }
    utf8.finish();
  }
}

// The text's token count and vocabulary.
struct TextVocab {
  int64_t tokens = 0;
  std::vector<uint32_t> code_points;  // chars: each id's code point; bytes: empty
  int64_t size() const {
    return code_points.empty() ? 256 : static_cast<int64_t>(code_points.size());
  }
};

// Bytes: one token per byte, counted from the files' sizes.
TextVocab count_bytes(const std::vector<std::string>& files) {
  TextVocab vocab;
  for (const std::string& path : files) {
    require_regular_file(path, "kdp::data", "text file ");
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_text"), !ec, IOError, "cannot read text file '{}': {}",
                  path, describe_file_error(ec.value()));
    vocab.tokens += static_cast<int64_t>(size);
  }
  return vocab;
}

// Chars: one pass over the text for its characters and their count.
TextVocab count_chars(const std::vector<std::string>& files, const std::string& out) {
  for (const std::string& path : files) require_regular_file(path, "kdp::data", "text file ");
  TextVocab vocab;
  std::vector<uint8_t> seen(kCodePoints, 0);
  scan_text(
      files, out,
      [&](char32_t c) {
        seen[c] = 1;
        ++vocab.tokens;
      },
      [](const unsigned char*, size_t) {});
  for (size_t c = 0; c < kCodePoints; ++c) {
    if (seen[c] != 0) vocab.code_points.push_back(static_cast<uint32_t>(c));
  }
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_text"), vocab.code_points.size() <= kMaxChars, IOError,
                "{} {} {} distinct characters; the chars tokenizer numbers at most {} (the bytes "
                "tokenizer takes any text)",
                describe_files(files), files.size() == 1 ? "holds" : "hold",
                vocab.code_points.size(), kMaxChars);
  return vocab;
}

// Where a split lies in the text's tokens and how many windows it gives.
struct SplitPlan {
  std::string name;
  int64_t first = 0;   // its first token's position in the text
  int64_t tokens = 0;  // its tokens
  int64_t rows = 0;    // windows of N + 1 tokens at stride N
};

// /test is the text's last round(test_fraction * tokens) tokens, /train the
// rest; each must hold at least one window.
std::array<SplitPlan, 2> plan_splits(int64_t tokens, const std::vector<std::string>& files,
                                     const TextOptions& text) {
  const bool one = files.size() == 1;
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_text"), tokens > 0, IOError,
                "{} {} no text: there are no tokens to import", describe_files(files),
                one ? "holds" : "hold");
  const int64_t test = std::llround(text.test_fraction * static_cast<double>(tokens));
  std::array<SplitPlan, 2> splits{
      {{"train", 0, tokens - test, 0}, {"test", tokens - test, test, 0}}};
  for (SplitPlan& s : splits) {
    KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_text"), s.tokens - 1 >= text.context, IOError,
                  "{} {} {} tokens ({}), of which the {} split (test fraction {}) gets {}: "
                  "fewer than one window of context {} + 1 tokens",
                  describe_files(files), one ? "gives" : "give", tokens,
                  tokenizer_name(text.tokenizer), s.name, text.test_fraction, s.tokens,
                  text.context);
    s.rows = (s.tokens - 1) / text.context;
  }
  return splits;
}

// Cuts a split's tokens into rows of N + 1 at stride N (consecutive rows share
// one token) and writes them to its dataset a block of rows at a time; the
// tail shorter than a window is dropped.
template <class T>
class WindowWriter {
 public:
  WindowWriter(io::h5::Dataset dataset, const SplitPlan& split, int64_t context, int64_t block_rows)
      : dataset_(std::move(dataset)),
        first_(split.first),
        end_(split.first + split.rows * context + 1),
        rows_(split.rows),
        context_(context),
        block_rows_(block_rows) {}

  // Tokens [position, position + n) of the text; those of the split are kept.
  template <class Token>
  void add(int64_t position, const Token* tokens, int64_t n) {
    const int64_t begin = std::max(position, first_), end = std::min(position + n, end_);
    if (begin < end) {
      pending_.insert(pending_.end(), tokens + (begin - position), tokens + (end - position));
    }
    while (written_ < rows_) {
      const int64_t count = std::min(block_rows_, rows_ - written_);
      if (static_cast<int64_t>(pending_.size()) < count * context_ + 1) break;
      write(count);
    }
  }
  bool complete() const { return written_ == rows_; }

 private:
  void write(int64_t count) {
    const auto width = static_cast<size_t>(context_ + 1), stride = static_cast<size_t>(context_);
    rows_buffer_.resize(static_cast<size_t>(count) * width);
    for (size_t r = 0; r < static_cast<size_t>(count); ++r) {
      std::copy_n(pending_.begin() + static_cast<std::ptrdiff_t>(r * stride), width,
                  rows_buffer_.begin() + static_cast<std::ptrdiff_t>(r * width));
    }
    dataset_.write_rows(written_, count, rows_buffer_.data());
    written_ += count;
    // The last row's last token is the next row's first.
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count) *
                                                            static_cast<std::ptrdiff_t>(stride));
  }

  io::h5::Dataset dataset_;
  int64_t first_, end_, rows_, context_, block_rows_;
  int64_t written_ = 0;
  std::vector<T> pending_;  // from the first token of row written_
  std::vector<T> rows_buffer_;
};

// The split's group, its attributes and its tokens dataset, chunked by rows:
// the options' chunk rows, fewer where a chunk would pass kChunkBytes.
template <class T>
WindowWriter<T> open_split(io::h5::File& file, const SplitPlan& split, const TextVocab& vocab,
                           const std::vector<std::string>& files, const TextOptions& text,
                           const ImportOptions& options) {
  io::h5::Group group = file.create_group(split.name);
  group.set_attribute("context", text.context);
  group.set_attribute("vocab_size", vocab.size());
  group.set_attribute("tokenizer", tokenizer_name(text.tokenizer));
  std::vector<std::string> sources;
  for (const std::string& path : files) sources.push_back(fs::absolute(path).string());
  group.set_attribute("source_texts", sources);
  group.set_attribute("first_token", split.first);
  group.set_attribute("text_tokens", split.tokens);
  const int64_t row_bytes = (text.context + 1) * static_cast<int64_t>(sizeof(T));
  const int64_t chunk = options.chunk_rows > 0
                            ? std::clamp<int64_t>(kChunkBytes / row_bytes, 1, options.chunk_rows)
                            : 0;
  const int64_t block =
      std::max<int64_t>(chunk, 1) *
      std::max<int64_t>(1, kWriteBytes / (std::max<int64_t>(chunk, 1) * row_bytes));
  const io::h5::Type type = sizeof(T) == 1 ? io::h5::Type::UInt8 : io::h5::Type::UInt16;
  return WindowWriter<T>(
      group.create_dataset("tokens", type, {split.rows, text.context + 1}, chunk, options.deflate),
      split, text.context, block);
}

// Bytes: the text's bytes are its tokens. Returns the tokens read.
template <class T>
int64_t feed_bytes(std::array<WindowWriter<T>, 2>& writers, const std::vector<std::string>& files,
                   const std::string& out) {
  int64_t position = 0;
  scan_text(
      files, out, [](char32_t) {},
      [&](const unsigned char* bytes, size_t n) {
        for (WindowWriter<T>& w : writers) w.add(position, bytes, static_cast<int64_t>(n));
        position += static_cast<int64_t>(n);
      });
  return position;
}

// Chars: each character's id in `code_points`. Returns the tokens read.
template <class T>
int64_t feed_chars(std::array<WindowWriter<T>, 2>& writers, const std::vector<std::string>& files,
                   const std::string& out, const std::vector<uint32_t>& code_points) {
  std::vector<T> id_of(kCodePoints, 0);
  for (size_t id = 0; id < code_points.size(); ++id) id_of[code_points[id]] = static_cast<T>(id);
  std::vector<T> ids;
  ids.reserve(kReadBytes);
  int64_t position = 0;
  scan_text(
      files, out, [&](char32_t c) { ids.push_back(id_of[c]); },
      [&](const unsigned char*, size_t) {
        for (WindowWriter<T>& w : writers) {
          w.add(position, ids.data(), static_cast<int64_t>(ids.size()));
        }
        position += static_cast<int64_t>(ids.size());
        ids.clear();
      });
  return position;
}

// Both splits' rows, as ids of type T.
template <class T>
void write_tokens(io::h5::File& file, const std::vector<std::string>& files, const TextVocab& vocab,
                  const std::array<SplitPlan, 2>& splits, const TextOptions& text,
                  const ImportOptions& options, const std::string& out) {
  std::array<WindowWriter<T>, 2> writers{
      open_split<T>(file, splits[0], vocab, files, text, options),
      open_split<T>(file, splits[1], vocab, files, text, options)};
  const int64_t tokens = text.tokenizer == Tokenizer::Bytes
                             ? feed_bytes(writers, files, out)
                             : feed_chars(writers, files, out, vocab.code_points);
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_text"),
                tokens == vocab.tokens && writers[0].complete() && writers[1].complete(), IOError,
                "{} changed during the import ({} tokens counted, then {} read)",
                describe_files(files), vocab.tokens, tokens);
}

ImportedText write_text(io::h5::File& file, const std::vector<std::string>& files,
                        const TextOptions& text, const ImportOptions& options,
                        const std::string& out) {
  const TextVocab vocab =
      text.tokenizer == Tokenizer::Bytes ? count_bytes(files) : count_chars(files, out);
  const std::array<SplitPlan, 2> splits = plan_splits(vocab.tokens, files, text);
  for (const char* name : {"train", "test", "vocab"}) {  // an earlier import's (Overwrite)
    if (file.exists(name)) H5Ldelete(file.id(), name, H5P_DEFAULT);
  }
  if (text.tokenizer == Tokenizer::Chars) {
    file.create_dataset("vocab", io::h5::Type::UInt32, {vocab.size()})
        .write_all(vocab.code_points.data());
  }
  if (vocab.size() <= 256) {
    write_tokens<uint8_t>(file, files, vocab, splits, text, options, out);
  } else {
    write_tokens<uint16_t>(file, files, vocab, splits, text, options, out);
  }
  return {vocab.tokens, vocab.size(), splits[0].rows, splits[1].rows};
}

}  // namespace

ImportedText import_text(const std::vector<std::string>& files, const std::string& out,
                         const TextOptions& text, const ImportOptions& options) {
  KDP_CHECK(!files.empty(), ValueError, "no text files to import into '{}'", out);
  KDP_CHECK(text.context >= 1, ValueError,
            "context {} for '{}': a window needs at least one token to predict", text.context, out);
  KDP_CHECK(text.test_fraction > 0.0 && text.test_fraction < 1.0, ValueError,
            "test fraction {} for '{}': it must lie between 0 and 1 (both splits need text)",
            text.test_fraction, out);
  ImportedText imported;
  detail::import_splits({"train", "test"}, out, options, [&](io::h5::File& file) {
    imported = write_text(file, files, text, options, out);
  });
  return imported;
}

}  // namespace kdp::data
