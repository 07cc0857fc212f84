#pragma once
// kdp's own host kernels at the speed of the CPU they land on. A kernel body
// is written once as plain loops over memory (KDP_ALWAYS_INLINE) and
// KDP_HOST_KERNEL compiles it three times, for AVX-512, AVX2 with FMA and the
// baseline the build targets, choosing by cpu_isa() at each call: a build for
// generic x86-64 (Debian's compiler defaults) vectorizes at the width of the
// CPU it runs on, and KDP_MAX_CPU_ISA runs the narrower variants on any
// machine (the tests do). Other CPUs, and builds with KDP_PORTABLE_KERNELS,
// compile the body once. host_chunks() spreads such a kernel over a device's
// host threads; kernels for GPUs stay Kokkos lambdas.

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>

#include "core/cpu_isa.hpp"
#include "kdp/core/device.hpp"

#define KDP_ALWAYS_INLINE inline __attribute__((always_inline))

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(KDP_PORTABLE_KERNELS) && !defined(__CUDACC__) && !defined(__HIPCC__)
#define KDP_HOST_KERNELS_X86 1
#endif

#if defined(KDP_HOST_KERNELS_X86)
/// Defines `void name params` running `body args` in the widest variant
/// cpu_isa() allows. `params` and `args` are parenthesised lists.
#define KDP_HOST_KERNEL(name, body, params, args)                                         \
  __attribute__((                                                                         \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))) void name##_avx512 params { \
    body args;                                                                            \
  }                                                                                       \
  __attribute__((target("avx2,fma"))) void name##_avx2 params {                           \
    body args;                                                                            \
  }                                                                                       \
  void name##_baseline params {                                                           \
    body args;                                                                            \
  }                                                                                       \
  void name params {                                                                      \
    const ::kdp::detail::CpuIsa isa_ = ::kdp::detail::cpu_isa();                          \
    if (isa_ >= ::kdp::detail::CpuIsa::Avx512) return name##_avx512 args;                 \
    if (isa_ >= ::kdp::detail::CpuIsa::Avx2) return name##_avx2 args;                     \
    name##_baseline args;                                                                 \
  }
#else
#define KDP_HOST_KERNEL(name, body, params, args) \
  void name params {                              \
    body args;                                    \
  }
#endif

namespace kdp::detail {

/// f(begin, end) for [0, n) in chunks of `chunk` (the last one shorter), the
/// chunks spread over the threads of the device's host instance. For host
/// backends only: f is host code.
template <class F>
void host_chunks(const char* label, const Device& device, int64_t n, int64_t chunk, const F& f) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  using Host = Kokkos::DefaultHostExecutionSpace;
  const int64_t count = (n + chunk - 1) / chunk;
  Kokkos::parallel_for(label,
                       Kokkos::RangePolicy<Host, Kokkos::IndexType<int64_t>>(
                           compat::host_instance(device.space()), 0, count),
                       [=](const int64_t c) { f(c * chunk, std::min(n, (c + 1) * chunk)); });
}

}  // namespace kdp::detail
