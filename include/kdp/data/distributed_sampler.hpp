#pragma once
/// \file
/// DistributedSampler: each rank's share of a dataset, with PyTorch's
/// semantics: the indices (shuffled by seed + epoch when `shuffle`) are padded
/// by repeating the first ones until every rank gets the same count (or cut to
/// a multiple of the ranks with drop_last), and rank r takes positions r,
/// r + ranks, ...
///
/// `exact` is for evaluation: no padding and no dropping, so ranks may get
/// counts that differ by one and every sample is counted exactly once (PyTorch's
/// padding double-counts samples in distributed metrics).

#include "kdp/data/sampler.hpp"

namespace kdp::data {

/// Shuffling, seed, drop_last and exact mode of a DistributedSampler.
struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  bool exact = false;

  /// Chained setters, one per option, to name each where it is set:
  /// DistributedSamplerOptions{}.with_shuffle(...).with_exact(...).
  DistributedSamplerOptions& with_shuffle(bool value) {
    shuffle = value;
    return *this;
  }
  DistributedSamplerOptions& with_seed(uint64_t value) {
    seed = value;
    return *this;
  }
  DistributedSamplerOptions& with_drop_last(bool value) {
    drop_last = value;
    return *this;
  }
  DistributedSamplerOptions& with_exact(bool value) {
    exact = value;
    return *this;
  }
};

/// Each rank's share of a dataset with PyTorch's semantics, or an exact share.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                     DistributedSamplerOptions options = {});
  std::vector<int64_t> indices() const override;
  /// This rank's count per epoch.
  int64_t size() const override;
  /// The count every rank gets outside exact mode (PyTorch's num_samples).
  int64_t samples_per_replica() const;
  int num_replicas() const { return replicas_; }
  int rank() const { return rank_; }
  const DistributedSamplerOptions& options() const { return options_; }
  int64_t dataset_size() const { return n_; }

 private:
  int64_t n_;
  int replicas_;
  int rank_;
  DistributedSamplerOptions options_;
};

}  // namespace kdp::data
