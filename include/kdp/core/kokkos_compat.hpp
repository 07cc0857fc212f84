#pragma once
/// \file
/// The one place that knows which Kokkos and Kokkos Kernels version kdp is built
/// against (Debian's 3.4 or a standalone 4.x). Everything else calls these.

#include <KokkosKernels_config.h>
#include <Kokkos_Core.hpp>
#if KOKKOS_VERSION >= 40100
#include <Kokkos_Profiling_ScopedRegion.hpp>
#endif

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace kdp {

/// The execution space every kdp kernel runs in, and its memory space: Kokkos'
/// default, or the host space a build names (KDP_EXECUTION_SPACE_SERIAL,
/// KDP_EXECUTION_SPACE_OPENMP; the tests' per-space builds do).
#if defined(KDP_EXECUTION_SPACE_SERIAL)
using ExecSpace = Kokkos::Serial;
#elif defined(KDP_EXECUTION_SPACE_OPENMP)
using ExecSpace = Kokkos::OpenMP;
#else
using ExecSpace = Kokkos::DefaultExecutionSpace;
#endif
using MemSpace = ExecSpace::memory_space;
using HostMirrorSpace = Kokkos::HostSpace;
/// The host space that runs kdp's own host kernels: ExecSpace on a host
/// backend, the default host space where kernels run on a GPU.
using HostExecSpace = std::conditional_t<std::is_same_v<MemSpace, Kokkos::HostSpace>, ExecSpace,
                                         Kokkos::DefaultHostExecutionSpace>;

namespace compat {

/// Math functions usable in kernels: Kokkos::Experimental:: in 3.x, Kokkos:: from 3.7.
#if KOKKOS_VERSION >= 30700
namespace math = ::Kokkos;
#else
namespace math = ::Kokkos::Experimental;
#endif

/// A quiet NaN, in kernels too (Kokkos' numeric traits have it from 4.0).
KOKKOS_INLINE_FUNCTION float quiet_nan() {
#if KOKKOS_VERSION >= 40000
  return Kokkos::Experimental::quiet_NaN<float>::value;
#else
  return __builtin_nanf("");
#endif
}

/// Waits for the work queued on `space`; labelled where Kokkos can (3.5+).
inline void fence(const ExecSpace& space, const char* label) {
#if KOKKOS_VERSION >= 30500
  space.fence(label);
#else
  (void)label;
  space.fence();
#endif
}

/// The matrices kdp multiplies: row-major float views of device memory.
using ConstMatrix = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using Matrix =
    Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// C = alpha op(A) op(B) + beta C on `space` through Kokkos Kernels (cuBLAS
/// through its shared handle on CUDA, the BLAS on host backends). Kokkos
/// Kernels before 3.6 has no execution-space argument; there the call runs on
/// the default instance, which is the only one such a build has.
void gemm(const ExecSpace& space, const char* trans_a, const char* trans_b, float alpha,
          ConstMatrix a, ConstMatrix b, float beta, Matrix c);

/// A BLAS handle of one execution-space instance. Kokkos Kernels' cuBLAS path
/// shares one handle per process and sets its stream on every call, so calls
/// from several host threads race; kdp gives every instance a handle of its
/// own, bound to the instance's stream once, and calls cuBLAS through it. On
/// host backends the BLAS needs no handle: only the instance is remembered.
class BlasHandle {
 public:
  explicit BlasHandle(const ExecSpace& space) : space_(space) {}
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;

  const ExecSpace& space() const { return space_; }
  /// The cuBLAS handle (a cublasHandle_t), created on first use on the
  /// instance's GPU and bound to its stream; null on host backends.
  void* cublas();

 private:
  ExecSpace space_;
  void* cublas_ = nullptr;
};

/// C = alpha op(A) op(B) + beta C on the instance of `handle`, all row-major:
/// with CUDA, cuBLAS through the instance's own handle; on host backends,
/// Kokkos Kernels (the BLAS).
void gemm(BlasHandle& handle, const char* trans_a, const char* trans_b, float alpha, ConstMatrix a,
          ConstMatrix b, float beta, Matrix c);

/// C (fp32) = alpha op(A) op(B) + beta C with A and B in bf16 (their 16 bits
/// as uint16_t, row-major with row lengths lda and ldb) and fp32 accumulation,
/// on the GPU of `handle` (cuBLAS' GemmEx). Only with CUDA: host backends
/// multiply bf16 elsewhere (oneDNN, or kdp's portable path).
void gemm_bf16(BlasHandle& handle, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               float alpha, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
               float beta, float* c, int64_t ldc);

/// C_i = alpha op(A_i) op(B_i) + beta C_i for i in [0, batch), every matrix
/// row-major (row lengths lda, ldb, ldc) and the i-th one `stride_*` elements
/// after the (i-1)-th, on the GPU of `handle` in one launch (cuBLAS'
/// strided-batched GEMM): fp32, or with `bf16` A and B as bf16 bits (uint16_t)
/// and fp32 accumulation. op(A_i) is m x k, op(B_i) k x n. Only with CUDA:
/// host backends multiply a batch one product at a time.
void gemm_strided_batched(BlasHandle& handle, bool bf16, bool trans_a, bool trans_b, int64_t batch,
                          int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                          int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                          float beta, float* c, int64_t ldc, int64_t stride_c);

/// GPUs the process sees before Kokkos starts (0 on host backends).
int visible_gpus();

/// The GPU an instance runs on (-1 on host backends).
inline int gpu_of(const ExecSpace& space) {
#if defined(KOKKOS_ENABLE_CUDA)
  return space.cuda_device();
#else
  (void)space;
  return -1;
#endif
}

/// Whether kernels run on a GPU.
constexpr bool gpu_backend() {
#if defined(KOKKOS_ENABLE_CUDA)
  return true;
#else
  return false;
#endif
}

/// Whether one process can drive several GPUs (CUDA from Kokkos 4.3).
constexpr bool several_gpus_per_process() {
#if defined(KOKKOS_ENABLE_CUDA) && KOKKOS_VERSION >= 40300
  return true;
#else
  return false;
#endif
}

/// The memory of GPU `gpu` in bytes (0 on host backends or when it cannot be read).
size_t gpu_memory_bytes(int gpu);

/// GPU `gpu`'s compute capability as 10 major + minor (90 for Hopper; 0 on
/// host backends or when it cannot be read).
int gpu_compute_capability(int gpu);

/// A new instance on GPU `gpu` with a stream of its own (only where
/// several_gpus_per_process()).
ExecSpace instance_on_gpu(int gpu);

/// The host instance that runs kdp's own host kernels for `space`: the
/// instance itself on host backends (an OpenMP partition stays one), a
/// HostExecSpace instance where kernels run on a GPU (kdp sends none there).
/// (A template, so that the branch a build does not take is not compiled.)
template <class Space>
HostExecSpace host_instance(const Space& space) {
  if constexpr (std::is_same_v<Space, HostExecSpace>) {
    return space;
  } else {
    (void)space;
    return HostExecSpace();
  }
}

/// Whether a Kokkos Tools connector is loaded (KOKKOS_PROFILE_LIBRARY on 3.4,
/// KOKKOS_TOOLS_LIBS on 4.x).
inline bool tools_loaded() {
  return Kokkos::Tools::profileLibraryLoaded();
}

/// A Kokkos Tools region from construction to destruction:
/// Kokkos::Profiling::ScopedRegion from Kokkos 4.1, pushRegion/popRegion
/// before it.
class ScopedRegion {
 public:
#if KOKKOS_VERSION >= 40100
  explicit ScopedRegion(const std::string& name) : region_(name) {}
#else
  explicit ScopedRegion(const std::string& name) {
    Kokkos::Profiling::pushRegion(name);
  }
  ~ScopedRegion() {
    Kokkos::Profiling::popRegion();
  }
#endif
  ScopedRegion(const ScopedRegion&) = delete;
  ScopedRegion& operator=(const ScopedRegion&) = delete;

 private:
#if KOKKOS_VERSION >= 40100
  Kokkos::Profiling::ScopedRegion region_;
#endif
};

/// Whether two instances are the same (Kokkos 3.4 has no operator== on
/// execution spaces; its Serial backend has one instance).
inline bool same_instance(const ExecSpace& a, const ExecSpace& b) {
#if KOKKOS_VERSION >= 40000
  return a == b;
#else
  (void)a;
  (void)b;
  return true;
#endif
}

/// Whether kdp's kernels run on OpenMP, on Serial.
constexpr bool on_openmp() {
#if defined(KOKKOS_ENABLE_OPENMP)
  return std::is_same_v<ExecSpace, Kokkos::OpenMP>;
#else
  return false;
#endif
}
constexpr bool on_serial() {
#if defined(KOKKOS_ENABLE_SERIAL)
  return std::is_same_v<ExecSpace, Kokkos::Serial>;
#else
  return false;
#endif
}

/// Whether `partition(space, n)` can give instances that run at the same time
/// when launched from different host threads.
constexpr bool instances_can_be_concurrent() {
  if constexpr (!std::is_same_v<MemSpace, Kokkos::HostSpace>) {
    return KOKKOS_VERSION >= 30500;  // GPU streams
  } else if constexpr (on_openmp()) {
    return KOKKOS_VERSION >= 40000;
  } else if constexpr (on_serial()) {
    return KOKKOS_VERSION >= 40200;
  } else {
    return false;
  }
}

/// The number of threads (or the concurrency) of one instance.
inline int concurrency(const ExecSpace& space) {
#if KOKKOS_VERSION >= 40000
  return space.concurrency();
#else
  (void)space;
  return ExecSpace::concurrency();
#endif
}

/// How many distinct concurrent instances `space` can be split into (0: none).
inline int max_partitions(const ExecSpace& space) {
  if constexpr (!instances_can_be_concurrent()) {
    (void)space;
    return 0;
  } else {
    if constexpr (on_openmp()) {
      return concurrency(space);  // each OpenMP partition needs a thread of its own
    } else {
      (void)space;
      return 1 << 16;
    }
  }
}

/// Splits `space` into `n` instances with equal weights. Only call when
/// instances_can_be_concurrent() and n <= max_partitions(space).
inline std::vector<ExecSpace> partition(const ExecSpace& space, int n) {
#if KOKKOS_VERSION >= 30500
  return Kokkos::Experimental::partition_space(space, std::vector<int>(static_cast<size_t>(n), 1));
#else
  return std::vector<ExecSpace>(static_cast<size_t>(n), space);
#endif
}

/// Starts Kokkos with `threads` threads for host backends (when the user has not
/// chosen a count through KOKKOS_NUM_THREADS; --kokkos-* arguments still win).
inline void initialize(int* argc, char*** argv, int threads) {
  if (threads > 0 && std::getenv("KOKKOS_NUM_THREADS") == nullptr) {
    setenv("KOKKOS_NUM_THREADS", std::to_string(threads).c_str(), 0);
  }
  if (argc != nullptr) {
    Kokkos::initialize(*argc, *argv);
  } else {
    Kokkos::initialize();
  }
}

/// The Kokkos version as "3.4.1".
inline std::string kokkos_version_string() {
  return std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) +
         "." + std::to_string(KOKKOS_VERSION % 100);
}

/// Whether the host can read and write tensor memory directly. (Callable in
/// kernels too: device code branches on it at compile time.)
KOKKOS_INLINE_FUNCTION constexpr bool host_accessible_memory() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
}

/// Whether kernels on `ExecSpace` finish before the launching call returns
/// (host backends), so no fence is needed to hand their results to another instance.
KOKKOS_INLINE_FUNCTION constexpr bool launches_are_synchronous() {
  return host_accessible_memory();
}

}  // namespace compat

}  // namespace kdp
