#pragma once
/// \file
/// Scans of host memory for NaN and infinity (every exponent bit set), in the
/// widest instruction set the CPU has: a gradient check every step and a
/// checkpoint's every value read or written go through them.

#include <cstdint>

namespace kdp::detail {

/// How many of x[0, n) are NaN or +-Inf.
int64_t count_non_finite(const float* x, int64_t n);

/// The index of the first NaN or +-Inf in x[0, n); n when every value is
/// finite.
int64_t first_non_finite(const float* x, int64_t n);

}  // namespace kdp::detail
