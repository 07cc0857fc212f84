#include "utf8_decoder.hpp"

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::data::detail {

void Utf8Decoder::start(unsigned char lead, int64_t at) {
  start_ = at;
  low_ = 0x80;
  high_ = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    need_ = 1;
    code_ = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    need_ = 2;
    code_ = lead & 0x0fu;
    if (lead == 0xe0) low_ = 0xa0;   // below: an overlong form
    if (lead == 0xed) high_ = 0x9f;  // above: a surrogate
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    need_ = 3;
    code_ = lead & 0x07u;
    if (lead == 0xf0) low_ = 0x90;   // below: an overlong form
    if (lead == 0xf4) high_ = 0x8f;  // above: beyond U+10FFFF
  } else {
    KDP_FAIL_FOR(KDP_ORIGIN_NAMED("import_text"), IOError,
                 "'{}' is not UTF-8 text: byte 0x{:02x} at byte offset {} cannot start a "
                 "character",
                 file_, lead, at);
  }
}

void Utf8Decoder::finish() const {
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED("import_text"), need_ == 0, IOError,
                "'{}' is not UTF-8 text: it ends inside the character that starts at byte "
                "offset {}",
                file_, start_);
}

void Utf8Decoder::refuse_nul(int64_t at) const {
  KDP_FAIL_FOR(KDP_ORIGIN_NAMED("import_text"), IOError,
               "'{}' holds a NUL byte at byte offset {}: it is a binary file, not text", file_, at);
}

void Utf8Decoder::refuse_malformed(unsigned char b, int64_t at) const {
  KDP_FAIL_FOR(KDP_ORIGIN_NAMED("import_text"), IOError,
               "'{}' is not UTF-8 text: the character at byte offset {} is malformed (byte "
               "0x{:02x} at byte offset {})",
               file_, start_, b, at);
}

}  // namespace kdp::data::detail
