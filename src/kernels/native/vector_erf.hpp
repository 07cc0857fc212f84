#pragma once
/// \file
/// The standard normal distribution function for kernels whose loops the
/// compiler should vectorize (GELU): as vector_exp, a branch-free form of what
/// a host compiler would otherwise call erff for, element by element. Device
/// backends keep their native erf.
///
/// With z = |x| / sqrt(2): erf(z) = z P(z^2) for z < 1, and
/// erfc(z) = e^(-z^2) Q(1 / z) beyond, with e^(-z^2) from z split into a high
/// part of 12 bits and the rest (so that the square loses nothing). P and Q
/// are least-squares fits of degree 6 and 11 (Q weighted by 1 / erfc e^(z^2)):
/// erf within 3 ulp below 1, erfc within 11 ulp beyond (float arithmetic,
/// against erf in double).

#include <cstdint>
#include <cstring>

#include "kernels/native/vector_exp.hpp"

namespace kdp::detail {

/// Phi(x) = (1 + erf(x / sqrt 2)) / 2.
KOKKOS_INLINE_FUNCTION float normal_cdf(float x) {
  constexpr float kSqrtHalf = 0.70710678118654752f;
  if constexpr (!compat::launches_are_synchronous()) {
    return 0.5f * (1.0f + compat::math::erf(x * kSqrtHalf));
  } else {
    const float z = x * kSqrtHalf;
    const float a = z < 0.0f ? -z : z;
    // erf(a) for a < 1.
    const float w = a * a;
    float p = 7.88250033e-05f;
    p = p * w - 8.01885898e-04f;
    p = p * w + 5.18931281e-03f;
    p = p * w - 2.68543295e-02f;
    p = p * w + 1.12835975e-01f;
    p = p * w - 3.76126269e-01f;
    p = p * w + 1.12837917e+00f;
    const float erf_small = a * p;
    // erfc(a) for a >= 1 (a below 1 is taken as 1 here, and not used).
    const float b = a < 1.0f ? 1.0f : a;
    const float t = 1.0f / b;
    float q = -1.5137413689e-01f;
    q = q * t + 8.0409725588e-01f;
    q = q * t - 1.7594176678e+00f;
    q = q * t + 1.9320336973e+00f;
    q = q * t - 8.6531315589e-01f;
    q = q * t - 3.2513107647e-01f;
    q = q * t + 5.2451775395e-01f;
    q = q * t - 1.4942909367e-02f;
    q = q * t - 2.8104810950e-01f;
    q = q * t - 2.7854360242e-05f;
    q = q * t + 5.6418971268e-01f;
    q = q * t;
    uint32_t bits;
    std::memcpy(&bits, &b, sizeof(bits));
    bits &= 0xFFFFF000u;
    float high;
    std::memcpy(&high, &bits, sizeof(high));
    const float low = b - high;  // exact
    const float erfc_big = q * (vector_exp(-(high * high)) * vector_exp(-(low * (b + high))));
    // Phi from whichever applies, on the side of z.
    const bool small = a < 1.0f;
    const float upper = small ? 0.5f + 0.5f * erf_small : 1.0f - 0.5f * erfc_big;
    const float lower = small ? 0.5f - 0.5f * erf_small : 0.5f * erfc_big;
    return z < 0.0f ? lower : upper;
  }
}

}  // namespace kdp::detail
