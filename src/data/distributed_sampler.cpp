#include "kdp/data/distributed_sampler.hpp"

#include <fmt/format.h>

#include <numeric>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : n_(dataset_size), replicas_(num_replicas), rank_(rank), options_(options) {
  KDP_CHECK(dataset_size >= 0, ValueError, "dataset size {} is negative", dataset_size);
  KDP_CHECK(num_replicas >= 1 && rank >= 0 && rank < num_replicas, ValueError,
            "rank {} is not in [0, {}) replicas", rank, num_replicas);
  KDP_CHECK(!options.exact || !options.drop_last, ValueError,
            "exact mode counts every sample; it cannot "
            "drop_last");
}

int64_t DistributedSampler::samples_per_replica() const {
  const int64_t r = replicas_;
  if (options_.drop_last && n_ % r != 0) {
    // PyTorch: ceil((n - r) / r), which is 0 when there are fewer samples than ranks.
    return n_ < r ? 0 : (n_ - r + r - 1) / r;
  }
  return (n_ + r - 1) / r;
}

int64_t DistributedSampler::size() const {
  if (options_.exact) return n_ / replicas_ + (rank_ < n_ % replicas_ ? 1 : 0);
  return samples_per_replica();
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (options_.shuffle) {
    all = permutation(n_, options_.seed + static_cast<uint64_t>(epoch_));
  } else {
    all.resize(static_cast<size_t>(n_));
    std::iota(all.begin(), all.end(), 0);
  }
  if (!options_.exact) {
    const int64_t total = samples_per_replica() * replicas_;
    if (!options_.drop_last) {
      // Pad by repeating the first indices (as often as needed) to `total`.
      const size_t original = all.size();
      for (size_t i = 0; all.size() < static_cast<size_t>(total) && original > 0; ++i) {
        all.push_back(all[i % original]);
      }
    } else {
      all.resize(static_cast<size_t>(total));
    }
  }
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(rank_); i < all.size(); i += static_cast<size_t>(replicas_)) {
    mine.push_back(all[i]);
  }
  return mine;
}

}  // namespace kdp::data
