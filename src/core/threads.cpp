#include "kdp/core/threads.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kdp/core/kokkos_compat.hpp"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#define KDP_DENORMALS_X86 1
#elif defined(__aarch64__)
#define KDP_DENORMALS_ARM64 1
#endif

namespace kdp {

namespace {
// Looked up at run time: the BLAS library is whatever libblas.so.3 points to.
template <class F>
F lookup(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}
}  // namespace

int blas_threads() {
  if (auto get = lookup<int (*)()>("openblas_get_num_threads")) return get();
  if (auto get = lookup<int (*)()>("mkl_get_max_threads")) return get();
  return 1;
}

bool set_blas_threads(int threads) {
  if (threads < 1) threads = 1;
  if (auto set = lookup<void (*)(int)>("openblas_set_num_threads")) {
    set(threads);
    return true;
  }
  if (auto set = lookup<void (*)(int)>("mkl_set_num_threads")) {
    set(threads);
    return true;
  }
  return false;
}

bool make_background_thread() {
#if defined(__linux__)
  sched_param param{};
  param.sched_priority = 0;  // the only priority SCHED_BATCH has
  return pthread_setschedparam(pthread_self(), SCHED_BATCH, &param) == 0;
#else
  return false;
#endif
}

#if defined(KDP_DENORMALS_ARM64)
namespace {
constexpr uint64_t kFpcrFlushToZero = uint64_t{1} << 24;
uint64_t read_fpcr() {
  uint64_t fpcr = 0;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
}  // namespace
#endif

namespace {

// The calling thread's control register.
bool set_flush_denormals_here(bool on) {
#if defined(KDP_DENORMALS_X86)
  _MM_SET_FLUSH_ZERO_MODE(on ? _MM_FLUSH_ZERO_ON : _MM_FLUSH_ZERO_OFF);
  _MM_SET_DENORMALS_ZERO_MODE(on ? _MM_DENORMALS_ZERO_ON : _MM_DENORMALS_ZERO_OFF);
  return true;
#elif defined(KDP_DENORMALS_ARM64)
  const uint64_t fpcr = on ? read_fpcr() | kFpcrFlushToZero : read_fpcr() & ~kFpcrFlushToZero;
  asm volatile("msr fpcr, %0" : : "r"(fpcr));
  return true;
#else
  (void)on;
  return false;
#endif
}

}  // namespace

bool set_flush_denormals(bool on) {
  if (!set_flush_denormals_here(on)) return false;
  // The host space's threads (OpenMP's): one iteration each, statically.
  if (Kokkos::is_initialized()) {
    using Host = HostExecSpace;
    const int n = Host().concurrency();
    if (n > 1) {
      Kokkos::parallel_for(
          "kdp::set_flush_denormals",
          Kokkos::RangePolicy<Host, Kokkos::Schedule<Kokkos::Static>>(0, n).set_chunk_size(1),
          [on](int) { set_flush_denormals_here(on); });
      Host().fence();
    }
  }
  return true;
}

bool flushes_denormals() {
#if defined(KDP_DENORMALS_X86)
  return _MM_GET_FLUSH_ZERO_MODE() == _MM_FLUSH_ZERO_ON &&
         _MM_GET_DENORMALS_ZERO_MODE() == _MM_DENORMALS_ZERO_ON;
#elif defined(KDP_DENORMALS_ARM64)
  return (read_fpcr() & kFpcrFlushToZero) != 0;
#else
  return false;
#endif
}

}  // namespace kdp
