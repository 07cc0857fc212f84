#pragma once
/// \file
/// A fork-join over plain threads, for host work that must use a rank's cores
/// where the Kokkos backend has one thread (Serial) and the BLAS is not the
/// one doing it: reproducible mode's row-independent products.

#include <cstdint>
#include <functional>

#include "kdp/core/device.hpp"

namespace kdp::detail {

/// Runs f(b) for every b in [0, blocks) on up to `threads` threads, the
/// calling one among them, and returns once all are done; the first exception
/// thrown is rethrown here. The other threads are kept for later calls; they
/// flush denormals as the caller does, and look for the next call for 2
/// milliseconds before they sleep, yielding the core after the first 100
/// microseconds (as OpenMP's and the BLAS's threads do: a step's products
/// follow one another closely, and waking a sleeping thread costs more than a
/// small product). A call from inside f runs on the calling thread alone.
void fork_join(int threads, int64_t blocks, const std::function<void(int64_t)>& f);

/// f(begin, end) over [0, n) in chunks of `chunk`: on the device's host
/// threads where its backend has several, else on `threads` threads by
/// fork_join.
void host_blocks(const Device& device, int threads, int64_t n, int64_t chunk,
                 const std::function<void(int64_t, int64_t)>& f);

}  // namespace kdp::detail
