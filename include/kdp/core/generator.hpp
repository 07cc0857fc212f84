#pragma once
/// \file
/// Generator: a counter-based random number generator (seed, offset), one per
/// device instance. Kernels draw the numbers for element i from hash(seed,
/// offset + i), so results do not depend on thread counts or backends, and the
/// whole state fits in two integers that a checkpoint can save.

#include "kdp/core/kokkos_compat.hpp"

#include <atomic>
#include <cstdint>

namespace kdp {

/// A counter-based random number generator: a seed and an offset.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed), offset_(0) {}

  /// Restarts the stream of numbers from `seed`.
  void manual_seed(uint64_t seed) {
    seed_.store(seed);
    offset_.store(0);
  }
  uint64_t seed() const { return seed_.load(); }
  uint64_t offset() const { return offset_.load(); }
  /// Restores a state saved from seed() and offset().
  void set_state(uint64_t seed, uint64_t offset) {
    seed_.store(seed);
    offset_.store(offset);
  }
  /// Claims `count` counters; returns the first.
  uint64_t reserve(uint64_t count) { return offset_.fetch_add(count); }

 private:
  std::atomic<uint64_t> seed_;
  std::atomic<uint64_t> offset_;
};

namespace random {

/// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
KOKKOS_INLINE_FUNCTION uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Added to a counter before it is mixed (keeps counter 0 away from the seed's mix).
constexpr uint64_t kCounterShift = 0x632BE59BD9B4E019ull;

/// 64 random bits for counter `counter` of the stream `seed`.
KOKKOS_INLINE_FUNCTION uint64_t bits(uint64_t seed, uint64_t counter) {
  return mix64(mix64(seed) ^ mix64(counter + kCounterShift));
}

/// A float uniform in [0, 1) with 24 random bits.
KOKKOS_INLINE_FUNCTION float uniform(uint64_t seed, uint64_t counter) {
  return static_cast<float>(bits(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

/// The stream `seed` with its key mixed once: the same numbers as bits() and
/// uniform(), for kernels that draw many of them.
struct Stream {
  uint64_t key;
  KOKKOS_INLINE_FUNCTION explicit Stream(uint64_t seed) : key(mix64(seed)) {}
  KOKKOS_INLINE_FUNCTION uint64_t bits(uint64_t counter) const {
    return mix64(key ^ mix64(counter + kCounterShift));
  }
  /// A 24-bit draw for `counter`, two counters to a 64-bit hash (the even
  /// one takes the high bits): half the hashing of one draw per counter, for
  /// the kernels that need many cheap draws (dropout masks).
  KOKKOS_INLINE_FUNCTION uint32_t draw24(uint64_t counter) const {
    const uint64_t b = bits(counter >> 1);
    return static_cast<uint32_t>((counter & 1) != 0 ? (b >> 8) & 0xFFFFFFull : b >> 40);
  }
  /// draw24() of counters 2 pair and 2 pair + 1, from one hash.
  KOKKOS_INLINE_FUNCTION void draw24_pair(uint64_t pair, uint32_t& even, uint32_t& odd) const {
    const uint64_t b = bits(pair);
    even = static_cast<uint32_t>(b >> 40);
    odd = static_cast<uint32_t>((b >> 8) & 0xFFFFFFull);
  }
  /// A Bernoulli draw: whether draw24(counter) / 2^24 >= p, for the
  /// `threshold` of p (uniform_threshold), compared in integers.
  KOKKOS_INLINE_FUNCTION bool at_least(uint64_t counter, uint32_t threshold) const {
    return draw24(counter) >= threshold;
  }
};

/// The smallest 24-bit draw k with k / 2^24 >= p (2^24 for p > 1 - 2^-24:
/// never).
inline uint32_t uniform_threshold(float p) {
  const double scaled = static_cast<double>(p) * 16777216.0;
  const double up = static_cast<double>(static_cast<uint64_t>(scaled));
  return static_cast<uint32_t>(up < scaled ? up + 1.0 : up);
}

/// A standard normal sample (Box-Muller on two 32-bit halves of one draw).
KOKKOS_INLINE_FUNCTION float normal(uint64_t seed, uint64_t counter) {
  const uint64_t b = bits(seed, counter);
  // u1 in (0, 1] so that log(u1) is finite; u2 in [0, 1).
  const double u1 = (static_cast<double>(b >> 32) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(b & 0xFFFFFFFFull) * (1.0 / 4294967296.0);
  const double r = compat::math::sqrt(-2.0 * compat::math::log(u1));
  return static_cast<float>(r * compat::math::cos(6.283185307179586 * u2));
}

}  // namespace random
}  // namespace kdp
