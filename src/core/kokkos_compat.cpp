// The compiled half of kokkos_compat.hpp: the GEMM paths (Kokkos Kernels'
// headers are heavy, so only this file includes them) and the CUDA runtime and
// cuBLAS calls behind BlasHandle and instance_on_gpu.
#include "kdp/core/kokkos_compat.hpp"

#include <KokkosBlas3_gemm.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

#include "core/check.hpp"

namespace kdp::compat {

void gemm(const ExecSpace& space, const char* trans_a, const char* trans_b, float alpha,
          ConstMatrix a, ConstMatrix b, float beta, Matrix c) {
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 30600
  KokkosBlas::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
#else
  (void)space;
  KokkosBlas::gemm(trans_a, trans_b, alpha, a, b, beta, c);
#endif
}

BlasHandle::~BlasHandle() {
#if defined(KOKKOS_ENABLE_CUDA)
  if (cublas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
#endif
}

void* BlasHandle::cublas() {
#if defined(KOKKOS_ENABLE_CUDA)
  if (cublas_ == nullptr) {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(space_.cuda_device());
    cublasHandle_t handle = nullptr;
    const cublasStatus_t created = cublasCreate(&handle);
    cudaSetDevice(current);
    KDP_CHECK(created == CUBLAS_STATUS_SUCCESS, DeviceError,
              "cublasCreate on GPU {} failed with status {}", space_.cuda_device(),
              static_cast<int>(created));
    cublasSetStream(handle, space_.cuda_stream());
    cublas_ = handle;
  }
#endif
  return cublas_;
}

void gemm(BlasHandle& handle, const char* trans_a, const char* trans_b, float alpha, ConstMatrix a,
          ConstMatrix b, float beta, Matrix c) {
#if defined(KOKKOS_ENABLE_CUDA)
  const bool ta = trans_a[0] == 'T' || trans_a[0] == 't';
  const bool tb = trans_b[0] == 'T' || trans_b[0] == 't';
  const int m = static_cast<int>(c.extent(0));
  const int n = static_cast<int>(c.extent(1));
  const int k = static_cast<int>(ta ? a.extent(0) : a.extent(1));
  if (m == 0 || n == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same
  // call with the operands swapped and the row-major matrices' row lengths as
  // leading dimensions.
  const int lda = static_cast<int>(a.extent(1) > 0 ? a.extent(1) : 1);
  const int ldb = static_cast<int>(b.extent(1) > 0 ? b.extent(1) : 1);
  cudaSetDevice(handle.space().cuda_device());  // the handle's GPU, where several are driven
  const cublasStatus_t status =
      cublasSgemm(static_cast<cublasHandle_t>(handle.cublas()), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                  ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b.data(), ldb, a.data(), lda,
                  &beta, c.data(), n);
  KDP_CHECK(status == CUBLAS_STATUS_SUCCESS, DeviceError,
            "cublasSgemm ({} x {} x {}) failed with status {}", m, n, k, static_cast<int>(status));
#else
  gemm(handle.space(), trans_a, trans_b, alpha, a, b, beta, c);
#endif
}

int visible_gpus() {
#if defined(KOKKOS_ENABLE_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

void gemm_bf16(BlasHandle& handle, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               float alpha, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
               float beta, float* c, int64_t ldc) {
#if defined(KOKKOS_ENABLE_CUDA)
  if (m == 0 || n == 0) return;
  // Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T (see gemm).
  cudaSetDevice(handle.space().cuda_device());
  const cublasStatus_t status =
      cublasGemmEx(static_cast<cublasHandle_t>(handle.cublas()),
                   trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                   static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                   CUDA_R_16BF, static_cast<int>(ldb), a, CUDA_R_16BF, static_cast<int>(lda), &beta,
                   c, CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  KDP_CHECK(status == CUBLAS_STATUS_SUCCESS, DeviceError,
            "cublasGemmEx (bf16, {} x {} x {}) failed with status {}", m, n, k,
            static_cast<int>(status));
#else
  (void)handle, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a,
      (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
  KDP_FAIL(StateError, "cuBLAS's bf16 product is for CUDA builds");
#endif
}

void gemm_strided_batched(BlasHandle& handle, bool bf16, bool trans_a, bool trans_b, int64_t batch,
                          int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                          int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                          float beta, float* c, int64_t ldc, int64_t stride_c) {
#if defined(KOKKOS_ENABLE_CUDA)
  if (batch == 0 || m == 0 || n == 0) return;
  // Row-major C_i = op(A_i) op(B_i) as column-major C_i^T = op(B_i)^T op(A_i)^T
  // (see gemm), B's batch before A's.
  cudaSetDevice(handle.space().cuda_device());
  const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasStatus_t status = cublasGemmStridedBatchedEx(
      static_cast<cublasHandle_t>(handle.cublas()), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, b, in, static_cast<int>(ldb), static_cast<long long>(stride_b),
      a, in, static_cast<int>(lda), static_cast<long long>(stride_a), &beta, c, CUDA_R_32F,
      static_cast<int>(ldc), static_cast<long long>(stride_c), static_cast<int>(batch),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  KDP_CHECK(status == CUBLAS_STATUS_SUCCESS, DeviceError,
            "cublasGemmStridedBatchedEx ({}, {} x [{} x {} x {}]) failed with status {}",
            bf16 ? "bf16" : "fp32", batch, m, n, k, static_cast<int>(status));
#else
  (void)handle, (void)bf16, (void)trans_a, (void)trans_b, (void)batch, (void)m, (void)n, (void)k,
      (void)alpha, (void)a, (void)lda, (void)stride_a, (void)b, (void)ldb, (void)stride_b,
      (void)beta, (void)c, (void)ldc, (void)stride_c;
  KDP_FAIL(StateError, "cuBLAS's strided-batched product is for CUDA builds");
#endif
}

int gpu_compute_capability(int gpu) {
#if defined(KOKKOS_ENABLE_CUDA)
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gpu) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, gpu) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 10 * major + minor;
#else
  (void)gpu;
  return 0;
#endif
}

size_t gpu_memory_bytes(int gpu) {
#if defined(KOKKOS_ENABLE_CUDA)
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(gpu);
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t got = cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaSetDevice(current);
  if (got != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return total_bytes;
#else
  (void)gpu;
  return 0;
#endif
}

ExecSpace instance_on_gpu(int gpu) {
#if defined(KOKKOS_ENABLE_CUDA) && KOKKOS_VERSION >= 40300
  int current = 0;
  cudaGetDevice(&current);
  cudaStream_t stream = nullptr;
  cudaSetDevice(gpu);
  const cudaError_t created = cudaStreamCreate(&stream);
  cudaSetDevice(current);
  KDP_CHECK(created == cudaSuccess, DeviceError, "cannot create a stream on GPU {}: {}", gpu,
            cudaGetErrorString(created));
  return ExecSpace(stream, Kokkos::Impl::ManageStream::yes);
#else
  (void)gpu;
  KDP_FAIL(DeviceError, "this Kokkos build cannot drive several GPUs from one process");
#endif
}

}  // namespace kdp::compat
