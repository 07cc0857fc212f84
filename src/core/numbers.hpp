#pragma once
/// \file
/// Checks of numbers read from files (checkpoints, state dicts) and options.

#include <cmath>

namespace kdp::detail {

/// Whether `v` is a finite number >= 0 (a rate, a coefficient). False for NaN.
inline bool is_finite_nonnegative(double v) {
  return v >= 0 && std::isfinite(v);
}

/// Whether `v` is a count stored as a double: a whole number in [0, 2^53],
/// where every whole number is exact. False for NaN and infinities.
inline bool is_count(double v) {
  return v >= 0 && v <= 9007199254740992.0 && std::trunc(v) == v;
}

}  // namespace kdp::detail
