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

/// Reproducible mode's exact sum of shard products: for shards t in
/// [0, shards), S_t = op(A)'s columns [starts[t], starts[t + 1]) times op(B)'s
/// rows alike, each element the chain of fused multiply-adds row_gemm makes
/// (from zero, in the order of p), is rounded as (double(S_t) + magic) -
/// magic, and D (m x n doubles, row length ldd) = the sum of the rounded
/// products over the shards, added to D's values where `add`. With `magic` =
/// 1.5 2^e above every product's grid (dist::detail::grid_exponent), each sum
/// is exact, so the same in any order: the shards' products are never stored.
void row_gemm_shard_sums(bool trans_a, bool trans_b, int64_t m, int64_t n, const int64_t* starts,
                         int shards, const float* a, int64_t lda, const float* b, int64_t ldb,
                         double magic, double* d, int64_t ldd, bool add);

}  // namespace kdp::detail
