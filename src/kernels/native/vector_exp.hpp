#pragma once
/// \file
/// exp for kernels whose loops the compiler should vectorize. Without
/// -ffast-math a host compiler calls expf once per element; this is the same
/// function as a branch-free polynomial (Cody and Waite's range reduction with
/// a degree-6 minimax polynomial, as in Cephes' expf: within 2 ulp of expf
/// over the whole float range), which vectorizes. Device backends keep their
/// native exp.

#include <cstdint>
#include <cstring>

#include "kdp/core/kokkos_compat.hpp"

namespace kdp::detail {

/// e^x, within 2 ulp for x in [-87.3, 88.3]; outside, e^-87.3 and e^88.3
/// (the largest power of two it scales by is 2^127).
KOKKOS_INLINE_FUNCTION float vector_exp(float x) {
  if constexpr (!compat::launches_are_synchronous()) {
    return compat::math::exp(x);
  } else {
    constexpr float kLog2e = 1.44269504088896341f;
    constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so that k * kLn2Hi is exact
    constexpr float kLn2Lo = -2.12194440e-4f;
    // Every comparison and operation runs unconditionally, so that the
    // compiler can turn the selects into vector blends (a nested ?: would make
    // a comparison conditional, and under IEEE trapping rules not speculable).
    // A NaN compares false and passes both clamps: e^NaN stays NaN.
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    // k, the nearest integer to x log2(e): adding 1.5 * 2^23 rounds
    // (|x log2 e| < 2^22), and the sum's bits are those of 1.5 * 2^23 plus k.
    // Taking k from those bits avoids a float-to-int conversion, which a NaN
    // would make undefined.
    constexpr float kRound = 12582912.0f;
    const float rounded = x * kLog2e + kRound;
    const float kf = rounded - kRound;
    uint32_t rounded_bits;
    std::memcpy(&rounded_bits, &rounded, sizeof(rounded_bits));
    const float r = (x - kf * kLn2Hi) - kf * kLn2Lo;  // |r| <= ln(2) / 2
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // 2^k: the biased exponent k + 127 in bits 23..30, in unsigned
    // arithmetic so that a NaN's arbitrary bits wrap instead of overflowing.
    constexpr uint32_t kRoundBits = 0x4B400000u;  // the bits of kRound
    const uint32_t bits = (rounded_bits - kRoundBits + 127u) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
  }
}

}  // namespace kdp::detail
