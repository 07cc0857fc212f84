#include "kdp/data/sampler.hpp"

#include <fmt/format.h>

#include <numeric>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::data {

namespace {

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (rejection of the short last range).
uint64_t bounded(uint64_t& state, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x = 0;
  do {
    x = splitmix(state);
  } while (x >= limit);
  return x % bound;
}

void check_size(const char* who, int64_t n) {
  KDP_CHECK_FOR(who, n >= 0, ValueError, "dataset size {} is negative", n);
}

}  // namespace

std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(bounded(state, static_cast<uint64_t>(i + 1)));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

SequentialSampler::SequentialSampler(int64_t dataset_size) : n_(dataset_size) {
  check_size("kdp::data::SequentialSampler", dataset_size);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

RandomSampler::RandomSampler(int64_t dataset_size, uint64_t seed) : n_(dataset_size), seed_(seed) {
  check_size("kdp::data::RandomSampler", dataset_size);
}

std::vector<int64_t> RandomSampler::indices() const {
  return permutation(n_, seed_ + static_cast<uint64_t>(epoch_));
}

}  // namespace kdp::data
