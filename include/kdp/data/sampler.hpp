#pragma once
/// \file
/// Samplers: the order in which a DataLoader visits a dataset's indices. The
/// order depends only on the seed and the epoch (set_epoch), never on threads
/// or the platform's random library.

#include <cstdint>
#include <vector>

namespace kdp::data {

/// The order in which a DataLoader visits a dataset's indices.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// This epoch's indices, in order.
  virtual std::vector<int64_t> indices() const = 0;
  /// The number of indices per epoch.
  virtual int64_t size() const = 0;
  /// Selects the epoch (reshuffles samplers that shuffle).
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

/// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t dataset_size);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

/// A permutation of 0..n-1 drawn from seed + epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t dataset_size, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

/// A permutation of 0..n-1 that depends only on `seed` (Fisher-Yates over a
/// 64-bit SplitMix stream with unbiased bounded draws).
std::vector<int64_t> permutation(int64_t n, uint64_t seed);

}  // namespace kdp::data
