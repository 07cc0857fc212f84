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

#if defined(KDP_X86_KERNELS)
#include <immintrin.h>
#endif

#if defined(KDP_X86_KERNELS)
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

/// Sixteen floats as one value, for kernels that keep lane-wise partial sums:
/// one 512-bit register in the AVX-512 variant, two or four narrower ones in
/// the others, the same additions in the same order in each (so the same
/// bits). The compiler's vector type where it has one, else an array.
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && !defined(__HIPCC__)
// Its helpers are always inlined: the ABI of passing it, which GCC warns
// about (-Wpsabi) in the variants without AVX-512, never applies; files that
// use it say so with KDP_LANES_ABI_IS_INTERNAL.
#define KDP_LANES_ABI_IS_INTERNAL _Pragma("GCC diagnostic ignored \"-Wpsabi\"")
#pragma GCC diagnostic push
KDP_LANES_ABI_IS_INTERNAL
typedef float Lanes16 __attribute__((vector_size(16 * sizeof(float))));
KDP_ALWAYS_INLINE Lanes16 load_lanes(const float* p) {
  Lanes16 v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
/// v where `by` is positive, else 0 (NaN in `by`: 0).
KDP_ALWAYS_INLINE Lanes16 where_positive(const Lanes16& by, const Lanes16& v) {
  const Lanes16 zero = {};
  return by > zero ? v : zero;
}
#pragma GCC diagnostic pop
#else
#define KDP_LANES_ABI_IS_INTERNAL
struct Lanes16 {
  float v[16] = {};
  float operator[](int k) const { return v[k]; }
  float& operator[](int k) { return v[k]; }
  friend Lanes16 operator+(Lanes16 a, const Lanes16& b) {
    for (int k = 0; k < 16; ++k) a.v[k] += b.v[k];
    return a;
  }
  friend Lanes16 operator+(Lanes16 a, float b) {
    for (int k = 0; k < 16; ++k) a.v[k] += b;
    return a;
  }
  friend Lanes16 operator-(Lanes16 a, float b) {
    for (int k = 0; k < 16; ++k) a.v[k] -= b;
    return a;
  }
  friend Lanes16 operator*(Lanes16 a, float b) {
    for (int k = 0; k < 16; ++k) a.v[k] *= b;
    return a;
  }
  friend Lanes16 operator*(Lanes16 a, const Lanes16& b) {
    for (int k = 0; k < 16; ++k) a.v[k] *= b.v[k];
    return a;
  }
  Lanes16& operator+=(const Lanes16& b) { return *this = *this + b; }
};
inline Lanes16 load_lanes(const float* p) {
  Lanes16 v;
  for (int k = 0; k < 16; ++k) v.v[k] = p[k];
  return v;
}
inline Lanes16 where_positive(const Lanes16& by, Lanes16 v) {
  for (int k = 0; k < 16; ++k) v.v[k] = by.v[k] > 0.0f ? v.v[k] : 0.0f;
  return v;
}
#endif

/// f(begin, end) for [0, n) in chunks of `chunk` (the last one shorter), the
/// chunks spread over the threads of the device's host instance. For host
/// backends only: f is host code.
template <class F>
void host_chunks(const char* label, const Device& device, int64_t n, int64_t chunk, const F& f) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  using Host = HostExecSpace;
  const int64_t count = (n + chunk - 1) / chunk;
  Kokkos::parallel_for(label,
                       Kokkos::RangePolicy<Host, Kokkos::IndexType<int64_t>>(
                           compat::host_instance(device.space()), 0, count),
                       [=](const int64_t c) { f(c * chunk, std::min(n, (c + 1) * chunk)); });
}

}  // namespace kdp::detail
