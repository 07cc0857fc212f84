#pragma once
// A strict, streaming UTF-8 decoder for text imports: blocks of a file's bytes
// in, code points out, a character split across two blocks included. It
// refuses what is not UTF-8 text (a byte that cannot start a character, a
// malformed or overlong sequence, a surrogate, a code point above U+10FFFF, a
// file ending inside a character) and NUL bytes (a binary file), naming the
// file and the byte offset.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace kdp::data::detail {

class Utf8Decoder {
 public:
  explicit Utf8Decoder(std::string file) : file_(std::move(file)) {}

  /// Decodes `n` bytes that start at byte `offset` of the file, calling
  /// emit(char32_t) for each character completed in them.
  template <class Emit>
  void decode(const unsigned char* bytes, size_t n, int64_t offset, Emit&& emit) {
    for (size_t i = 0; i < n; ++i) {
      const unsigned char b = bytes[i];
      if (need_ == 0 && b < 0x80) {
        if (b == 0) refuse_nul(offset + static_cast<int64_t>(i));
        emit(static_cast<char32_t>(b));
      } else if (need_ == 0) {
        start(b, offset + static_cast<int64_t>(i));
      } else {
        if (b < low_ || b > high_) refuse_malformed(b, offset + static_cast<int64_t>(i));
        code_ = (code_ << 6) | (b & 0x3fu);
        low_ = 0x80;
        high_ = 0xbf;
        if (--need_ == 0) emit(code_);
      }
    }
  }

  /// Refuses a file that ended inside a character.
  void finish() const;

 private:
  // A lead byte: how many continuation bytes follow and the range of the
  // next one (Unicode's table 3-7, which rules out overlong forms,
  // surrogates and code points above U+10FFFF).
  void start(unsigned char lead, int64_t at);
  [[noreturn]] void refuse_nul(int64_t at) const;
  [[noreturn]] void refuse_malformed(unsigned char b, int64_t at) const;

  std::string file_;
  char32_t code_ = 0;
  int need_ = 0;
  unsigned char low_ = 0x80, high_ = 0xbf;
  int64_t start_ = 0;  // offset of the character being decoded
};

}  // namespace kdp::data::detail
