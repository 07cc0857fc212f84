#include "kdp/data/token_dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.hpp"
#include "io/hdf5.hpp"
#include "kdp/core/error.hpp"
#include "utf8_decoder.hpp"

namespace kdp::data {

namespace {

// The UTF-8 bytes of code point `c`.
std::string utf8_of(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    s.push_back(static_cast<char>(0xc0 | (c >> 6)));
    s.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    s.push_back(static_cast<char>(0xe0 | (c >> 12)));
    s.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    s.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    s.push_back(static_cast<char>(0xf0 | (c >> 18)));
    s.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    s.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    s.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
  return s;
}

}  // namespace

bool TokenDataset::holds_tokens(const std::string& path, const std::string& split) {
  try {
    const io::h5::File f = io::h5::File::open(path);
    return f.exists(split) && f.open_group(split).exists("tokens");
  } catch (const Error&) {
    return false;
  }
}

TokenDataset::TokenDataset(const std::string& path, const std::string& split)
    : path_(path), split_(split) {
  const io::h5::File f = io::h5::File::open(path);
  KDP_CHECK(f.exists(split) && f.open_group(split).exists("tokens"), IOError,
            "'{}' holds no token windows for split '{}' (/{}/tokens, as kdp-data import-text "
            "writes them)",
            path, split, split);
  const io::h5::Group g = f.open_group(split);
  const io::h5::Dataset d = g.open_dataset("tokens");
  const std::vector<int64_t> dims = d.dims();
  KDP_CHECK(dims.size() == 2 && dims[1] >= 2, IOError,
            "/{}/tokens of '{}' has shape [{}]: token windows are [rows, N + 1] with N >= 1", split,
            path, fmt::join(dims, ", "));
  rows_ = dims[0];
  context_ = dims[1] - 1;
  wide_ = d.type() != io::h5::Type::UInt8;
  KDP_CHECK(d.type() == io::h5::Type::UInt8 || d.type() == io::h5::Type::UInt16, IOError,
            "/{}/tokens of '{}' holds {}: token ids are uint8 or uint16", split, path,
            d.type_name());
  for (const char* a : {"context", "vocab_size", "tokenizer"}) {
    KDP_CHECK(g.has_attribute(a), IOError, "/{} of '{}' has no attribute '{}' of token windows",
              split, path, a);
  }
  KDP_CHECK(g.attribute_int("context") == context_, IOError,
            "/{} of '{}' says context {} but its rows hold {} tokens", split, path,
            g.attribute_int("context"), dims[1]);
  vocab_ = g.attribute_int("vocab_size");
  tokenizer_ = g.attribute_string("tokenizer");
  tokens_ = d.read_all<uint16_t>();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    KDP_CHECK(tokens_[i] < vocab_, IOError,
              "/{}/tokens of '{}' holds id {} (row {}, position {}) but the vocabulary has {}",
              split, path, tokens_[i], i / static_cast<size_t>(dims[1]),
              i % static_cast<size_t>(dims[1]), vocab_);
  }
  read_vocabulary("/" + split);
  measure();
}

void TokenDataset::read_vocabulary(const std::string& split_group) {
  KDP_CHECK(tokenizer_ == "bytes" || tokenizer_ == "chars", IOError,
            "{} of '{}' has tokenizer '{}': kdp reads 'bytes' and 'chars'", split_group, path_,
            tokenizer_);
  if (tokenizer_ == "bytes") {
    KDP_CHECK(vocab_ == 256, IOError, "{} of '{}' holds byte tokens but says vocab_size {}",
              split_group, path_, vocab_);
    return;
  }
  const io::h5::File f = io::h5::File::open(path_);
  KDP_CHECK(f.exists("vocab"), IOError,
            "'{}' holds character tokens but no /vocab table of their code points", path_);
  vocab_of_ = f.open_dataset("vocab").read_all<uint32_t>();
  KDP_CHECK(static_cast<int64_t>(vocab_of_.size()) == vocab_, IOError,
            "/vocab of '{}' has {} code points but {} says vocab_size {}", path_, vocab_of_.size(),
            split_group, vocab_);
}

// Bytes per target token and the targets' order-0 entropy, over the split.
void TokenDataset::measure() {
  std::vector<int64_t> count(static_cast<size_t>(vocab_), 0);
  const auto row = static_cast<size_t>(context_ + 1);
  for (size_t r = 0; r < static_cast<size_t>(rows_); ++r) {
    for (size_t j = 1; j < row; ++j) ++count[tokens_[r * row + j]];
  }
  const double targets = static_cast<double>(rows_ * context_);
  double bytes = 0.0, bits = 0.0;
  for (size_t id = 0; id < count.size(); ++id) {
    if (count[id] == 0) continue;
    const double c = static_cast<double>(count[id]);
    bytes += c * (vocab_of_.empty() ? 1.0 : static_cast<double>(utf8_of(vocab_of_[id]).size()));
    bits -= c * std::log2(c / targets);
  }
  bytes_per_token_ = targets > 0 ? bytes / targets : 1.0;
  order0_bits_per_byte_ = bytes > 0 ? bits / bytes : 0.0;
}

void TokenDataset::fetch(const std::vector<int64_t>& indices, float* features,
                         float* labels) const {
  const auto n = static_cast<size_t>(context_), row = n + 1;
  for (size_t k = 0; k < indices.size(); ++k) {
    const uint16_t* t = tokens_.data() + static_cast<size_t>(indices[k]) * row;
    for (size_t j = 0; j < n; ++j) {
      features[k * n + j] = static_cast<float>(t[j]);
      labels[k * n + j] = static_cast<float>(t[j + 1]);
    }
  }
}

std::optional<ByteFeatures> TokenDataset::byte_features() const {
  ByteFeatures b;
  b.scale = 1.0f;  // ids, not intensities
  b.type = wide_ ? StoredType::UInt16 : StoredType::UInt8;
  return b;
}

void TokenDataset::fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                               float* labels) const {
  const auto n = static_cast<size_t>(context_), row = n + 1;
  for (size_t k = 0; k < indices.size(); ++k) {
    const uint16_t* t = tokens_.data() + static_cast<size_t>(indices[k]) * row;
    for (size_t j = 0; j < n; ++j) {
      if (wide_) {
        std::memcpy(features + (k * n + j) * 2, t + j, 2);
      } else {
        features[k * n + j] = static_cast<uint8_t>(t[j]);
      }
      labels[k * n + j] = static_cast<float>(t[j + 1]);
    }
  }
}

std::string TokenDataset::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) {
    KDP_CHECK(id >= 0 && id < vocab_, ValueError,
              "token id {} is outside the vocabulary of '{}' ({} tokens)", id, path_, vocab_);
    if (vocab_of_.empty()) {
      text.push_back(static_cast<char>(static_cast<uint8_t>(id)));
    } else {
      text += utf8_of(vocab_of_[static_cast<size_t>(id)]);
    }
  }
  return text;
}

std::vector<int64_t> TokenDataset::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  if (vocab_of_.empty()) {
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  detail::Utf8Decoder decoder("the text to encode");
  decoder.decode(
      reinterpret_cast<const unsigned char*>(text.data()), text.size(), 0, [&](char32_t c) {
        const auto at =
            std::lower_bound(vocab_of_.begin(), vocab_of_.end(), static_cast<uint32_t>(c));
        KDP_CHECK(at != vocab_of_.end() && *at == static_cast<uint32_t>(c), ValueError,
                  "the character U+{:04X} is not in the vocabulary of '{}'",
                  static_cast<uint32_t>(c), path_);
        ids.push_back(at - vocab_of_.begin());
      });
  decoder.finish();
  return ids;
}

}  // namespace kdp::data
