#pragma once
/// \file
/// Launch helpers for kdp kernels: 64-bit ranges on a device's instance, and a
/// two-dimensional form that avoids per-element division on the host.

#include <string>

#include "kdp/core/device.hpp"

namespace kdp::detail {

using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<int64_t>>;

inline Range range(const Device& device, int64_t n) {
  return Range(device.space(), 0, n);
}

/// Calls f(r, c) for every r < rows, c < cols on the device's instance. On host
/// backends each work item is a row walked by a contiguous (vectorisable) loop;
/// elsewhere every element is its own work item.
template <class F>
void for_each_2d(const std::string& label, const Device& device, int64_t rows, int64_t cols,
                 const F& f) {
  if (rows == 0 || cols == 0) return;
  if constexpr (compat::launches_are_synchronous()) {
    Kokkos::parallel_for(
        label, range(device, rows), KOKKOS_LAMBDA(const int64_t r) {
          for (int64_t c = 0; c < cols; ++c) f(r, c);
        });
  } else {
    Kokkos::parallel_for(
        label, range(device, rows * cols),
        KOKKOS_LAMBDA(const int64_t i) { f(i / cols, i % cols); });
  }
}

}  // namespace kdp::detail
