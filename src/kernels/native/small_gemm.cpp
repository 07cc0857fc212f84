#include "kernels/native/small_gemm.hpp"

// The kernel needs x86-64 intrinsics compiled for AVX2 and FMA inside an
// otherwise baseline build (GCC or clang target attributes). CUDA and HIP
// builds keep tensors on the GPU, where the vendor BLAS takes every product.
#include "core/cpu_isa.hpp"

#if defined(KDP_X86_KERNELS)
#include <immintrin.h>

#include <vector>
#endif

namespace kdp::detail {

#if defined(KDP_X86_KERNELS)

namespace {

#define KDP_AVX2 __attribute__((target("avx2,fma")))

// Lanes [0, width) of an 8-float vector, for the columns past the last full one.
KDP_AVX2 inline __m256i lane_mask(int64_t width) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(width)), lanes);
}

// One row of C's tile: out = alpha acc + beta out, the last vector masked
// when the tile is narrower than its vectors.
template <int V>
KDP_AVX2 inline void store_row(float* c, __m256 acc0, __m256 acc1, float alpha, float beta,
                               bool full, __m256i last) {
  const __m256 al = _mm256_set1_ps(alpha);
  __m256 out[2] = {_mm256_mul_ps(al, acc0), _mm256_mul_ps(al, acc1)};
  for (int v = 0; v < V; ++v) {
    const bool masked = !full && v + 1 == V;
    if (beta != 0.0f) {
      const __m256 old = masked ? _mm256_maskload_ps(c + 8 * v, last) : _mm256_loadu_ps(c + 8 * v);
      out[v] = _mm256_fmadd_ps(_mm256_set1_ps(beta), old, out[v]);
    }
    if (masked) {
      _mm256_maskstore_ps(c + 8 * v, last, out[v]);
    } else {
      _mm256_storeu_ps(c + 8 * v, out[v]);
    }
  }
}

// R rows x (8 V) columns of C from B [k x n] (row-major, row length ldb) and
// A(i, p) = a[i * a_row + p * a_col]; `width` columns are real (the rest of
// the last vector is masked off). The accumulators are named variables, not
// an array, so that they stay in registers through the loop.
template <int R, int V>
KDP_AVX2 inline void tile(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col,
                          const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                          int64_t width) {
  const bool full = width == 8 * V;
  const __m256i last = lane_mask(width - 8 * (V - 1));
  const __m256i first = V == 1 ? last : _mm256_set1_epi32(-1);
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00;
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    const __m256 b0 = full || V == 2 ? _mm256_loadu_ps(bp) : _mm256_maskload_ps(bp, first);
    const __m256 b1 = V == 1 ? _mm256_setzero_ps()
                      : full ? _mm256_loadu_ps(bp + 8)
                             : _mm256_maskload_ps(bp + 8, last);
    const float* ap = a + p * a_col;
    __m256 av = _mm256_broadcast_ss(ap);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    if constexpr (V == 2) c01 = _mm256_fmadd_ps(av, b1, c01);
    if constexpr (R > 1) {
      av = _mm256_broadcast_ss(ap + a_row);
      c10 = _mm256_fmadd_ps(av, b0, c10);
      if constexpr (V == 2) c11 = _mm256_fmadd_ps(av, b1, c11);
    }
    if constexpr (R > 2) {
      av = _mm256_broadcast_ss(ap + 2 * a_row);
      c20 = _mm256_fmadd_ps(av, b0, c20);
      if constexpr (V == 2) c21 = _mm256_fmadd_ps(av, b1, c21);
    }
    if constexpr (R > 3) {
      av = _mm256_broadcast_ss(ap + 3 * a_row);
      c30 = _mm256_fmadd_ps(av, b0, c30);
      if constexpr (V == 2) c31 = _mm256_fmadd_ps(av, b1, c31);
    }
  }
  store_row<V>(c, c00, c01, alpha, beta, full, last);
  if constexpr (R > 1) store_row<V>(c + ldc, c10, c11, alpha, beta, full, last);
  if constexpr (R > 2) store_row<V>(c + 2 * ldc, c20, c21, alpha, beta, full, last);
  if constexpr (R > 3) store_row<V>(c + 3 * ldc, c30, c31, alpha, beta, full, last);
}

// Rows [0, m) of one block of up to 16 columns, four rows at a time.
template <int V>
KDP_AVX2 void column_block(int64_t m, int64_t k, float alpha, const float* a, int64_t a_row,
                           int64_t a_col, const float* b, int64_t ldb, float beta, float* c,
                           int64_t ldc, int64_t width) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    tile<4, V>(k, alpha, a + i * a_row, a_row, a_col, b, ldb, beta, c + i * ldc, ldc, width);
  }
  const float* ai = a + i * a_row;
  float* ci = c + i * ldc;
  switch (m - i) {
    case 3:
      tile<3, V>(k, alpha, ai, a_row, a_col, b, ldb, beta, ci, ldc, width);
      break;
    case 2:
      tile<2, V>(k, alpha, ai, a_row, a_col, b, ldb, beta, ci, ldc, width);
      break;
    case 1:
      tile<1, V>(k, alpha, ai, a_row, a_col, b, ldb, beta, ci, ldc, width);
      break;
    default:
      break;
  }
}

KDP_AVX2 void multiply(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                       int64_t a_col, const float* b, int64_t ldb, float beta, float* c,
                       int64_t ldc) {
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t width = n - j < 16 ? n - j : 16;
    if (width > 8) {
      column_block<2>(m, k, alpha, a, a_row, a_col, b + j, ldb, beta, c + j, ldc, width);
    } else {
      column_block<1>(m, k, alpha, a, a_row, a_col, b + j, ldb, beta, c + j, ldc, width);
    }
  }
}

#undef KDP_AVX2

}  // namespace

bool small_gemm_available() {
  static const bool available = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return available;
}

bool small_gemm_preferred() {
  static const bool preferred = small_gemm_available() && !__builtin_cpu_supports("avx512f");
  return preferred;
}

bool small_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  // (Each dimension is bounded before any product of them can overflow.)
  constexpr int64_t kMax = kSmallGemmMaxWork;
  if (m <= 0 || n <= 0 || k <= 0 || m > kMax || n > kMax || k > kMax || m * n > kMax ||
      m * n * k > kMax || (trans_b && k * n > kSmallGemmMaxPacked) || !small_gemm_available()) {
    return false;
  }
  // A^T B with few columns (a weight gradient of a narrow layer): the wide
  // C^T = B^T A fills the vectors better, and C is its transpose.
  if (trans_a && !trans_b && n % 16 != 0 && n < 16 && m >= 32) {
    thread_local std::vector<float> transposed;
    transposed.resize(static_cast<size_t>(n * m));
    multiply(n, m, k, alpha, b, 1, ldb, a, lda, 0.0f, transposed.data(), m);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float v = transposed[static_cast<size_t>(j * m + i)];
        c[i * ldc + j] = beta == 0.0f ? v : v + beta * c[i * ldc + j];
      }
    }
    return true;
  }
  // The kernel walks rows of op(B): a transposed B is copied into that form
  // first (k x n floats, at most kSmallGemmMaxPacked).
  if (trans_b) {
    thread_local std::vector<float> packed;
    packed.resize(static_cast<size_t>(k * n));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) packed[static_cast<size_t>(p * n + j)] = b[j * ldb + p];
    }
    multiply(m, n, k, alpha, a, trans_a ? 1 : lda, trans_a ? lda : 1, packed.data(), n, beta, c,
             ldc);
  } else {
    multiply(m, n, k, alpha, a, trans_a ? 1 : lda, trans_a ? lda : 1, b, ldb, beta, c, ldc);
  }
  return true;
}

#else

bool small_gemm_available() {
  return false;
}

bool small_gemm_preferred() {
  return false;
}

bool small_gemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                int64_t, float, float*, int64_t) {
  return false;
}

#endif

}  // namespace kdp::detail
