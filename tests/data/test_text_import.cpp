#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "io/hdf5.hpp"
#include "kdp/core/error.hpp"
#include "kdp/data/importer.hpp"
#include "temp_dir.hpp"

using namespace kdp;
namespace fs = std::filesystem;

using kdp::test::TempDir;

namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string write_file(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string utf8(const std::u32string& text) {
  std::string out;
  for (const char32_t c : text) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

// Lines of English prose, n bytes in all.
std::string prose(size_t n) {
  const std::string line = "The quick brown fox jumps over the lazy dog, again and again.\n";
  std::string out;
  while (out.size() < n) out += line;
  out.resize(n);
  return out;
}

// A split's tokens as written: [rows, N + 1] read back.
template <class T>
std::vector<T> tokens_of(const std::string& out, const std::string& split,
                         std::vector<int64_t>* dims = nullptr) {
  const io::h5::File f = io::h5::File::open(out);
  const io::h5::Dataset d = f.open_dataset("/" + split + "/tokens");
  if (dims != nullptr) *dims = d.dims();
  return d.read_all<T>();
}

// The tokens the rows cover, in order: the first row whole, then each later
// row without the token it shares with the one before.
template <class T>
std::vector<T> covered(const std::vector<T>& rows, int64_t context) {
  const size_t width = static_cast<size_t>(context + 1);
  std::vector<T> out;
  for (size_t r = 0; r * width < rows.size(); ++r) {
    out.insert(out.end(), rows.begin() + static_cast<std::ptrdiff_t>(r * width + (r == 0 ? 0 : 1)),
               rows.begin() + static_cast<std::ptrdiff_t>((r + 1) * width));
  }
  return out;
}

template <class E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning " << parts.front();
  } catch (const E& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' is not in: " << e.what();
    }
  }
}

data::TextOptions context(int64_t n) {
  return data::TextOptions{}.with_context(n);
}

}  // namespace

TEST(ImportText, BytesRowsAreWindowsOfTheTextAtStrideN) {
  TempDir dir;
  const std::string text = prose(1000);
  const std::string in = write_file(dir, "small.txt", text), out = dir.file("text.h5");
  const data::ImportedText t = data::import_text({in}, out, context(8).with_test_fraction(0.25));
  EXPECT_EQ(t.tokens, 1000);
  EXPECT_EQ(t.vocab_size, 256);
  std::vector<int64_t> dims;
  const std::vector<uint8_t> rows = tokens_of<uint8_t>(out, "train", &dims);
  ASSERT_EQ(dims, (std::vector<int64_t>{(750 - 1) / 8, 9}));
  EXPECT_EQ(t.train_rows, dims[0]);
  for (int64_t r = 0; r < dims[0]; ++r) {
    for (int64_t k = 0; k < 9; ++k) {
      ASSERT_EQ(rows[static_cast<size_t>(r * 9 + k)],
                static_cast<uint8_t>(text[static_cast<size_t>(r * 8 + k)]))
          << "row " << r << " token " << k;
    }
  }
  const io::h5::File f = io::h5::File::open(out);
  const io::h5::Group train = f.open_group("train");
  EXPECT_EQ(train.attribute_int("context"), 8);
  EXPECT_EQ(train.attribute_int("vocab_size"), 256);
  EXPECT_EQ(train.attribute_string("tokenizer"), "bytes");
  EXPECT_EQ(train.attribute_strings("source_texts"),
            std::vector<std::string>{fs::absolute(in).string()});
  EXPECT_EQ(f.attribute_string("format"), "kdp-dataset");
  EXPECT_EQ(f.open_dataset("/train/tokens").type_name(), "uint8");
  EXPECT_FALSE(f.exists("vocab"));
}

TEST(ImportText, TestSplitIsTheTextsEndAndEachTailIsDropped) {
  TempDir dir;
  const std::string text = prose(100);
  const std::string in = write_file(dir, "t.txt", text), out = dir.file("text.h5");
  // 100 tokens: /test the last 10 (3 rows of 3 + 1 cover them all), /train the
  // first 90 (29 rows; tokens 88 and 89, a tail shorter than a window, dropped).
  const data::ImportedText t = data::import_text({in}, out, context(3));
  EXPECT_EQ(t.train_rows, 29);
  EXPECT_EQ(t.test_rows, 3);
  std::vector<int64_t> dims;
  const std::vector<uint8_t> test = tokens_of<uint8_t>(out, "test", &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(std::string(test.begin(), test.begin() + 4), text.substr(90, 4));
  EXPECT_EQ(std::string(test.end() - 4, test.end()), text.substr(96, 4));
  const std::vector<uint8_t> train = tokens_of<uint8_t>(out, "train");
  const std::vector<uint8_t> all = covered(train, 3);
  EXPECT_EQ(std::string(all.begin(), all.end()), text.substr(0, 88));
  const io::h5::File f = io::h5::File::open(out);
  EXPECT_EQ(f.open_group("train").attribute_int("first_token"), 0);
  EXPECT_EQ(f.open_group("train").attribute_int("text_tokens"), 90);
  EXPECT_EQ(f.open_group("test").attribute_int("first_token"), 90);
  EXPECT_EQ(f.open_group("test").attribute_int("text_tokens"), 10);
}

TEST(ImportText, CharsTableAndIdsDecodeBackToTheText) {
  TempDir dir;
  std::u32string text;
  for (int i = 0; i < 40; ++i) text += U"naïve café — 日本語の文 😀 Ωmega\n";
  const std::string in = write_file(dir, "u.txt", utf8(text)), out = dir.file("text.h5");
  const data::ImportedText t =
      data::import_text({in}, out, context(16).with_tokenizer(data::Tokenizer::Chars));
  const std::set<char32_t> distinct(text.begin(), text.end());
  EXPECT_EQ(t.tokens, static_cast<int64_t>(text.size()));
  EXPECT_EQ(t.vocab_size, static_cast<int64_t>(distinct.size()));
  const io::h5::File f = io::h5::File::open(out);
  const std::vector<uint32_t> vocab = f.open_dataset("vocab").read_all<uint32_t>();
  EXPECT_EQ(std::vector<uint32_t>(distinct.begin(), distinct.end()), vocab);  // ascending
  EXPECT_EQ(f.open_dataset("vocab").type_name(), "uint32");
  EXPECT_EQ(f.open_dataset("/train/tokens").type_name(), "uint8");
  EXPECT_EQ(f.open_group("test").attribute_string("tokenizer"), "chars");
  EXPECT_EQ(f.open_group("test").attribute_int("vocab_size"), t.vocab_size);
  for (const std::string split : {"train", "test"}) {
    const int64_t first = f.open_group(split).attribute_int("first_token");
    const std::vector<uint8_t> ids = covered(tokens_of<uint8_t>(out, split), 16);
    std::u32string decoded;
    for (const uint8_t id : ids) decoded += static_cast<char32_t>(vocab.at(id));
    EXPECT_EQ(decoded, text.substr(static_cast<size_t>(first), decoded.size())) << split;
    EXPECT_EQ(static_cast<int64_t>(decoded.size()),
              (f.open_group(split).attribute_int("text_tokens") - 1) / 16 * 16 + 1);
  }
}

TEST(ImportText, CharsBeyond256AreStoredAsUInt16) {
  TempDir dir;
  std::u32string text;
  for (char32_t c = 0x4e00; c < 0x4e00 + 300; ++c) text += c;
  text += text;
  const std::string in = write_file(dir, "cjk.txt", utf8(text)), out = dir.file("text.h5");
  const data::ImportedText t =
      data::import_text({in}, out, context(10).with_tokenizer(data::Tokenizer::Chars));
  EXPECT_EQ(t.vocab_size, 300);
  const io::h5::File f = io::h5::File::open(out);
  EXPECT_EQ(f.open_dataset("/train/tokens").type_name(), "uint16");
  const std::vector<uint16_t> ids = tokens_of<uint16_t>(out, "train");
  for (size_t k = 0; k < 11; ++k) EXPECT_EQ(ids[k], k);  // the first row: ids 0..10
  EXPECT_EQ(ids[11], 10);                                // the second starts where it ended
}

TEST(ImportText, SeveralFilesAreOneTextInTheirOrder) {
  TempDir dir;
  const std::string a = prose(300), b = "Zwischen den Dateien.\n", c = prose(500);
  const std::vector<std::string> files = {write_file(dir, "a.txt", a), write_file(dir, "b.txt", b),
                                          write_file(dir, "c.txt", c)};
  const std::string out = dir.file("text.h5");
  data::import_text(files, out, context(5).with_test_fraction(0.5));
  const std::string text = a + b + c;
  const std::vector<uint8_t> train = covered(tokens_of<uint8_t>(out, "train"), 5);
  const std::vector<uint8_t> test = covered(tokens_of<uint8_t>(out, "test"), 5);
  const size_t half = text.size() - text.size() / 2;
  EXPECT_EQ(std::string(train.begin(), train.end()), text.substr(0, train.size()));
  EXPECT_EQ(std::string(test.begin(), test.end()), text.substr(half, test.size()));
  EXPECT_EQ(io::h5::File::open(out).open_group("test").attribute_strings("source_texts").size(),
            3u);
}

TEST(ImportText, OneLineOfMegabytesIsStreamed) {
  TempDir dir;
  std::mt19937 gen(7);
  std::string line(5'000'000, ' ');
  for (char& ch : line) ch = static_cast<char>('a' + gen() % 26);
  const std::string in = write_file(dir, "line.txt", line), out = dir.file("text.h5");
  data::import_text({in}, out, context(1000));
  const std::vector<uint8_t> train = covered(tokens_of<uint8_t>(out, "train"), 1000);
  EXPECT_EQ(train.size(), 4'499'001u);  // (4.5 M - 1) / 1000 rows of 1000 + 1
  EXPECT_TRUE(std::equal(train.begin(), train.end(), line.begin()));
  const std::vector<uint8_t> test = covered(tokens_of<uint8_t>(out, "test"), 1000);
  EXPECT_TRUE(std::equal(test.begin(), test.end(), line.begin() + 4'500'000));
}

TEST(ImportText, CharactersAcrossReadBlocksDecodeWhole) {
  // 2- to 4-byte characters on one line of 2.7 MB, 15 bytes a group: the 1 MiB
  // blocks the files are read in end inside characters.
  TempDir dir;
  std::u32string text;
  while (text.size() < 900'000) text += U"日本語😀é";
  const std::string in = write_file(dir, "wide.txt", utf8(text)), out = dir.file("text.h5");
  data::import_text({in}, out, context(64).with_tokenizer(data::Tokenizer::Chars));
  const std::vector<uint32_t> vocab =
      io::h5::File::open(out).open_dataset("vocab").read_all<uint32_t>();
  EXPECT_EQ(vocab, (std::vector<uint32_t>{U'é', U'日', U'本', U'語', U'😀'}));
  const std::vector<uint8_t> ids = covered(tokens_of<uint8_t>(out, "train"), 64);
  std::u32string decoded;
  for (const uint8_t id : ids) decoded += static_cast<char32_t>(vocab[id]);
  EXPECT_EQ(decoded, text.substr(0, decoded.size()));
}

TEST(ImportText, FilesThatAreNotTextAreRefusedNamingFileAndOffset) {
  TempDir dir;
  const std::string out = dir.file("text.h5");
  for (const data::Tokenizer tokenizer : {data::Tokenizer::Bytes, data::Tokenizer::Chars}) {
    const data::TextOptions o = context(4).with_tokenizer(tokenizer);
    const std::string text = prose(200);
    const std::string empty = write_file(dir, "empty.txt", "");
    expect_error<IOError>([&] { data::import_text({empty}, out, o); }, {"empty.txt", "no text"});
    const std::string nul = write_file(dir, "nul.bin", text.substr(0, 50) + '\0' + text);
    expect_error<IOError>([&] { data::import_text({nul}, out, o); },
                          {"nul.bin", "NUL byte at byte offset 50", "binary"});
    const std::string bad =
        write_file(dir, "latin1.txt", text.substr(0, 70) + "caf\xe9 au lait" + text);
    expect_error<IOError>([&] { data::import_text({bad}, out, o); },
                          {"latin1.txt", "not UTF-8", "byte offset 73"});
    const std::string lead = write_file(dir, "ff.txt", text + "\xff");
    expect_error<IOError>([&] { data::import_text({lead}, out, o); },
                          {"ff.txt", "byte 0xff at byte offset 200"});
    const std::string overlong = write_file(dir, "overlong.txt", text + "\xc0\xaf" + text);
    expect_error<IOError>([&] { data::import_text({overlong}, out, o); },
                          {"overlong.txt", "byte offset 200"});
    const std::string surrogate = write_file(dir, "surrogate.txt", text + "\xed\xa0\x80" + text);
    expect_error<IOError>([&] { data::import_text({surrogate}, out, o); },
                          {"surrogate.txt", "malformed", "byte offset 200"});
    const std::string cut = write_file(dir, "cut.txt", text + "\xe6\x97");
    expect_error<IOError>([&] { data::import_text({cut}, out, o); },
                          {"cut.txt", "ends inside the character", "byte offset 200"});
    const std::string ok = write_file(dir, "ok.txt", text);
    expect_error<IOError>(
        [&] {
          data::import_text({ok, dir.file("missing.txt")}, out, o);
        },
        {"missing.txt"});
  }
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
}

TEST(ImportText, ATextTooShortForAWindowInBothSplitsIsRefused) {
  TempDir dir;
  const std::string in = write_file(dir, "short.txt", prose(100)), out = dir.file("text.h5");
  // /test gets 10 tokens: too few for 16 + 1.
  expect_error<IOError>([&] { data::import_text({in}, out, context(16)); },
                        {"short.txt", "gives 100 tokens", "test split", "gets 10", "context 16"});
  // /train gets 50: too few for 60 + 1.
  expect_error<IOError>([&] { data::import_text({in}, out, context(60).with_test_fraction(0.5)); },
                        {"train split", "gets 50", "context 60"});
  EXPECT_FALSE(fs::exists(out));
  // Exactly one window in each.
  const data::ImportedText t = data::import_text({in}, out, context(9));
  EXPECT_EQ(t.test_rows, 1);
}

TEST(ImportText, OptionsOutOfRangeAreValueErrors) {
  TempDir dir;
  const std::string in = write_file(dir, "t.txt", prose(1000)), out = dir.file("text.h5");
  expect_error<ValueError>([&] { data::import_text({in}, out, context(0)); }, {"context 0"});
  for (const double f : {0.0, 1.0, -0.5, 1.5}) {
    expect_error<ValueError>(
        [&] { data::import_text({in}, out, context(4).with_test_fraction(f)); }, {"test fraction"});
  }
  expect_error<ValueError>([&] { data::import_text({}, out, context(4)); }, {"no text files"});
}

TEST(ImportText, MoreThan65536DistinctCharactersAreRefused) {
  TempDir dir;
  std::u32string text;
  for (char32_t c = 0x10000; c < 0x10000 + 70000; ++c) text += c;
  const std::string in = write_file(dir, "many.txt", utf8(text)), out = dir.file("text.h5");
  expect_error<IOError>(
      [&] { data::import_text({in}, out, context(4).with_tokenizer(data::Tokenizer::Chars)); },
      {"many.txt", "70000 distinct characters", "65536"});
  data::import_text({in}, out, context(4));  // bytes take it
}

TEST(ImportText, AnExistingOutputIsRefusedUnchangedOrOverwrittenWhole) {
  TempDir dir;
  const std::string in = write_file(dir, "t.txt", prose(2000)), out = dir.file("text.h5");
  data::import_text({in}, out, context(8).with_tokenizer(data::Tokenizer::Chars));
  const std::string before = bytes_of(out);
  expect_error<IOError>([&] { data::import_text({in}, out, context(8)); },
                        {"text.h5", "already has a 'train' split", "--overwrite"});
  EXPECT_EQ(bytes_of(out), before);
  // A file of another kind is never written into, even when asked.
  const std::string other = write_file(dir, "notes.h5", "not a dataset");
  expect_error<IOError>(
      [&] {
        data::import_text({in}, other, context(8),
                          data::ImportOptions{}.with_existing(data::ExistingOutput::Overwrite));
      },
      {"notes.h5"});
  EXPECT_EQ(bytes_of(other), "not a dataset");
  // Overwrite replaces the splits and drops the chars table of the bytes import.
  data::import_text(
      {in}, out, context(4),
      data::ImportOptions{}.with_existing(data::ExistingOutput::Overwrite).with_dataset("prose"));
  const io::h5::File f = io::h5::File::open(out);
  EXPECT_FALSE(f.exists("vocab"));
  EXPECT_EQ(f.open_group("train").attribute_string("tokenizer"), "bytes");
  EXPECT_EQ(f.open_dataset("/train/tokens").dims()[1], 5);
  EXPECT_EQ(f.attribute_string("dataset"), "prose");
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
}

TEST(ImportText, InterruptedImportLeavesTheExistingOutputUntouched) {
  TempDir dir;
  const std::string out = dir.file("text.h5");
  const std::string small = write_file(dir, "small.txt", prose(1000));
  data::import_text({small}, out, context(8));
  const std::string before = bytes_of(out);
  const std::string big = write_file(dir, "big.txt", prose(40'000'000));  // a second of work
  std::atomic<bool> stop_watching{false};
  std::thread signaller([&] {
    while (!stop_watching) {
      for (const auto& e : dir.entries()) {
        if (e.find(".tmp.") != std::string::npos) {
          ::kill(::getpid(), SIGINT);
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  try {
    data::import_text({big}, out, context(64),
                      data::ImportOptions{}.with_existing(data::ExistingOutput::Overwrite));
    ADD_FAILURE() << "the import was not interrupted";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("interrupted by signal"), std::string::npos) << e.what();
  }
  stop_watching = true;
  signaller.join();
  EXPECT_EQ(bytes_of(out), before);
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
}
