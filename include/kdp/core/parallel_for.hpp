#pragma once
/// \file
/// The range policy kdp kernels use: 64-bit indices on a device's instance.

#include "kdp/core/device.hpp"

namespace kdp::detail {

using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<int64_t>>;

inline Range range(const Device& device, int64_t n) {
  return Range(device.space(), 0, n);
}

}  // namespace kdp::detail
