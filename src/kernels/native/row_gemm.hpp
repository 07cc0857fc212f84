#pragma once
/// \file
/// A GEMM whose every output row has the same bits whatever the other rows
/// are: C(i, j) = alpha * (sum over p of op(A)(i, p) op(B)(p, j), one fused
/// multiply-add after another in the order of p from zero) + beta C(i, j). The
/// BLAS gives no such promise (its kernels for the edges of a matrix, its
/// small-matrix paths and its threads may add in another order), so
/// reproducible mode multiplies a rank's whole batch with this one: a sample's
/// row is then the same at every layout. Host memory, on the calling thread;
/// AVX-512, or AVX2 and FMA, where cpu_isa() allows, else a portable loop
/// with the same fused multiply-adds: the same bits on every path.

#include <cstdint>

namespace kdp::detail {

/// C = alpha op(A) op(B) + beta C for row-major float matrices in host memory:
/// op(A) is m x k, op(B) k x n, C m x n; lda, ldb and ldc are the row lengths
/// of the matrices as stored. With beta == 0, C is only written (as in BLAS).
void row_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc);

/// The same promise for bf16 products with fp32 sums (autocast's): op(A) and
/// op(B) rounded to bf16 as to_bf16 rounds, and each element's sum taking the
/// inner dimension in pairs from p = 0 (a missing last one is zero), each as
/// AVX512_BF16's vdpbf16ps makes it: acc + a(i, 2q+1) b(2q+1, j), then + a(i,
/// 2q) b(2q, j), each one fused multiply-add whose subnormal result is
/// flushed to a zero of its sign. One vdpbf16ps per pair where cpu_isa()
/// allows it; with AVX2, row_gemm's fp32 chains on the rounded operands taken
/// in that order (where a sum on the way is subnormal, the portable loop
/// instead); else a portable loop with the same arithmetic: the same bits on
/// every path.
void row_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);

/// Whether row_gemm_bf16 runs on vector kernels here (vdpbf16ps, or AVX2's
/// fp32 chains; else its portable loop, which is for tests and for
/// correctness, not for speed).
bool row_gemm_bf16_fast();

}  // namespace kdp::detail
