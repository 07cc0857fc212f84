#pragma once
/// \file
/// A GEMM for the small products of small models (the explainer's 10-100-10
/// MLP multiplies 64 x 100 by 100 x 10), where a BLAS spends more time zeroing,
/// packing and dispatching than multiplying. Host memory only, on the calling
/// thread, with AVX2 and FMA chosen at run time (the rest of kdp stays built
/// for the baseline CPU); ops fall back to the BLAS where it does not apply.

#include <cstdint>

namespace kdp::detail {

/// The largest m * n * k small_gemm takes; beyond it the BLAS's blocking and
/// threads win.
constexpr int64_t kSmallGemmMaxWork = int64_t{1} << 20;
/// The largest transposed B (k * n floats) it copies into rows first.
constexpr int64_t kSmallGemmMaxPacked = 4096;

/// Whether small_gemm can run on this CPU (x86-64 with AVX2 and FMA).
bool small_gemm_available();

/// Whether kdp's ops take small products to small_gemm rather than the BLAS:
/// where it can run and the CPU has no AVX-512, whose small-matrix kernels in
/// the BLAS (OpenBLAS has them for AVX-512 only) work on twice the vector
/// width.
bool small_gemm_preferred();

/// C = alpha op(A) op(B) + beta C for row-major float matrices in host memory:
/// op(A) is m x k, op(B) k x n, C m x n; lda, ldb and ldc are the row lengths
/// of the matrices as stored. With beta == 0, C is only written (as in BLAS).
/// Returns false, touching nothing, where it does not run: no AVX2/FMA,
/// m * n * k above kSmallGemmMaxWork, or a transposed B above
/// kSmallGemmMaxPacked.
bool small_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc);

}  // namespace kdp::detail
