#pragma once
/// \file
/// TokenDataset: windows of text for next-token prediction, in the layout
/// kdp-data import-text writes (data::import_text): /<split>/tokens
/// [rows, N + 1] of token ids, with the split's context, vocabulary size and
/// tokenizer as attributes (and /vocab, the code point of each id, for
/// characters). Sample i is row i: its features are the first N ids (as
/// floats, for an Embedding), its targets the last N (the next token at each
/// position: class indices among the vocabulary).
#include <cstdint>
#include <string>
#include <vector>

#include "kdp/data/dataset.hpp"

namespace kdp::data {

/// A split of a token file, held in memory (one or two bytes a token).
class TokenDataset : public Dataset {
 public:
  /// IOError naming the file for a split without tokens, rows of fewer than
  /// two tokens, attributes that contradict the rows, or ids at or beyond
  /// the vocabulary.
  TokenDataset(const std::string& path, const std::string& split);

  /// Whether `path` is an HDF5 file whose `split` holds token windows.
  static bool holds_tokens(const std::string& path, const std::string& split = "train");

  int64_t size() const override { return rows_; }
  Shape sample_shape() const override { return Shape{context_}; }
  Shape label_shape() const override { return Shape{context_}; }
  int64_t num_classes() const override { return vocab_; }
  std::string feature_type() const override { return wide_ ? "uint16" : "uint8"; }
  void fetch(const std::vector<int64_t>& indices, float* features, float* labels) const override;
  /// The ids as stored, unscaled: the loader turns them into floats.
  std::optional<ByteFeatures> byte_features() const override;
  void fetch_bytes(const std::vector<int64_t>& indices, uint8_t* features,
                   float* labels) const override;

  /// N: the tokens a sample's features hold.
  int64_t context() const { return context_; }
  /// "bytes" or "chars".
  const std::string& tokenizer() const { return tokenizer_; }
  /// The UTF-8 bytes of text each target token stands for, on average over
  /// the split's targets (1 for byte tokens).
  double bytes_per_token() const { return bytes_per_token_; }
  /// The entropy of the split's target tokens taken one at a time (each by
  /// its frequency alone), in bits per byte of text: what a model that has
  /// learnt nothing but the frequencies reaches.
  double order0_bits_per_byte() const { return order0_bits_per_byte_; }
  /// The text that token ids stand for (ids outside the vocabulary are a
  /// ValueError). Byte tokens that split a character give its bytes as they
  /// are.
  std::string decode(const std::vector<int64_t>& ids) const;
  /// The ids of `text` under this dataset's tokenizer; a character outside
  /// the vocabulary is a ValueError naming it.
  std::vector<int64_t> encode(const std::string& text) const;
  const std::string& path() const { return path_; }

 private:
  void read_vocabulary(const std::string& split_group);
  void measure();

  std::string path_, split_;
  std::vector<uint16_t> tokens_;    // rows_ x (context_ + 1)
  std::vector<uint32_t> vocab_of_;  // code point of each id (chars)
  int64_t rows_ = 0, context_ = 0, vocab_ = 0;
  bool wide_ = false;
  std::string tokenizer_;
  double bytes_per_token_ = 1.0, order0_bits_per_byte_ = 0.0;
};

}  // namespace kdp::data
