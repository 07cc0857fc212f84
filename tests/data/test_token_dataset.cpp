// TokenDataset on files import_text writes: samples and their next tokens,
// the text back from the ids, and the figures kdp-train reports with them
// (bytes per token, the order-0 entropy) against their closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kdp/core/error.hpp"
#include "kdp/data/importer.hpp"
#include "kdp/data/splits.hpp"
#include "kdp/data/token_dataset.hpp"
#include "temp_dir.hpp"

using namespace kdp;
using kdp::test::TempDir;

namespace {

std::string text_file(const TempDir& dir, const std::string& text) {
  const std::string path = dir.file("text.txt");
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// H of the symbols' frequencies, in bits per symbol.
template <class T>
double entropy_bits(const std::vector<T>& symbols) {
  std::map<T, double> count;
  for (const T& s : symbols) count[s] += 1.0;
  double h = 0.0;
  for (const auto& [s, c] : count) h -= c / symbols.size() * std::log2(c / symbols.size());
  return h * static_cast<double>(symbols.size());
}

}  // namespace

TEST(TokenDataset, SamplesAreWindowsAndTheirTargetsTheNextTokens) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "abcdefghij"[i % 10] + std::string(i % 3, 'x');
  const std::string out = dir.file("t.h5");
  data::import_text({text_file(dir, text)}, out, data::TextOptions{}.with_context(6));
  data::TokenDataset train(out, "train");
  EXPECT_EQ(train.sample_shape(), Shape{6});
  EXPECT_EQ(train.label_shape(), Shape{6});
  EXPECT_EQ(train.num_classes(), 256);
  EXPECT_EQ(train.tokenizer(), "bytes");
  ASSERT_GE(train.size(), 3);
  std::vector<float> x(12), y(12);
  train.fetch({2, 0}, x.data(), y.data());
  for (int j = 0; j < 6; ++j) {  // row r holds the text's bytes [6r, 6r + 6]
    EXPECT_EQ(x[static_cast<size_t>(j)], static_cast<unsigned char>(text[12 + j]));
    EXPECT_EQ(y[static_cast<size_t>(j)], static_cast<unsigned char>(text[13 + j]));
    EXPECT_EQ(x[static_cast<size_t>(6 + j)], static_cast<unsigned char>(text[j]));
  }
  // The loader's way (bytes as stored) gives the same samples.
  std::vector<uint8_t> bytes(12);
  std::vector<float> y2(12);
  train.fetch_bytes({2, 0}, bytes.data(), y2.data());
  for (size_t j = 0; j < 12; ++j) EXPECT_EQ(static_cast<float>(bytes[j]), x[j]);
  EXPECT_EQ(y2, y);
  EXPECT_EQ(train.decode({104, 105}), "hi");
  EXPECT_EQ(train.encode("hi"), (std::vector<int64_t>{104, 105}));
  EXPECT_THROW(train.decode({256}), ValueError);
}

TEST(TokenDataset, BytesPerTokenAndTheOrderZeroEntropyAreTheTextsOwn) {
  TempDir dir;
  std::u32string chars;
  for (int i = 0; i < 300; ++i) chars += U"aäb€ "[i * 7 % 5];
  std::string text;  // UTF-8: a, b and space one byte, ä two, € three
  std::vector<char32_t> symbols(chars.begin(), chars.end());
  for (char32_t c : chars) {
    text += c == U'ä'   ? "\xc3\xa4"
            : c == U'€' ? "\xe2\x82\xac"
                        : std::string(1, static_cast<char>(c));
  }
  const std::string out = dir.file("c.h5");
  data::import_text({text_file(dir, text)}, out,
                    data::TextOptions{}.with_context(10).with_tokenizer(data::Tokenizer::Chars));
  data::TokenDataset train(out, "train");
  EXPECT_EQ(train.num_classes(), 5);
  EXPECT_EQ(train.tokenizer(), "chars");
  // The targets: the split's characters but its first, up to whole windows.
  const int64_t targets = train.size() * 10;
  std::vector<char32_t> seen(symbols.begin() + 1, symbols.begin() + 1 + targets);
  double bytes = 0.0;
  for (char32_t c : seen) bytes += c == U'ä' ? 2 : c == U'€' ? 3 : 1;
  EXPECT_NEAR(train.bytes_per_token(), bytes / static_cast<double>(targets), 1e-12);
  EXPECT_NEAR(train.order0_bits_per_byte(), entropy_bits(seen) / bytes, 1e-12);
  // Ids back to text, and text to ids.
  std::vector<float> x(10), y(10);
  train.fetch({0}, x.data(), y.data());
  std::vector<int64_t> ids(x.begin(), x.end());
  std::string first;
  for (size_t i = 0, k = 0; k < 10; ++k) {  // the text's first ten characters
    const size_t len = (static_cast<unsigned char>(text[i]) >= 0xe0)   ? 3
                       : (static_cast<unsigned char>(text[i]) >= 0xc0) ? 2
                                                                       : 1;
    first += text.substr(i, len);
    i += len;
  }
  EXPECT_EQ(train.decode(ids), first);
  EXPECT_EQ(train.encode(first), ids);
  EXPECT_THROW(train.encode("z"), ValueError);
}

TEST(TokenDataset, OpenSplitsTakesATokenFileWhole) {
  TempDir dir;
  const std::string out = dir.file("t.h5");
  data::import_text({text_file(dir, std::string(400, 'q') + "the end of the text")}, out,
                    data::TextOptions{}.with_context(8));
  data::SplitSpec spec;
  spec.file = out;
  const data::Splits s = data::open_splits(spec);
  ASSERT_TRUE(s.tokens());
  EXPECT_EQ(s.train->sample_shape(), Shape{8});
  EXPECT_NE(s.val_name.find("/test/tokens"), std::string::npos) << s.val_name;
  spec.val_fraction = 0.2;  // windows held out of the text would overlap the training ones
  EXPECT_THROW(data::open_splits(spec), ValueError);
  EXPECT_FALSE(data::TokenDataset::holds_tokens(dir.file("none.h5")));
}
