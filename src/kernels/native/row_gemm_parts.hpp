#pragma once
// What row_gemm's fp32 and bf16 kernels share: an operand as strides, the
// 8 x 8 transposition that packs a stored-transposed operand, and C = alpha
// op(A) op(B) + beta C from a kernel's sums.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cpu_isa.hpp"

#if defined(KDP_X86_KERNELS)
#include <immintrin.h>
#endif

namespace kdp::detail::row_gemm_parts {

// op(A)(i, p) = data[i * row + p * col]; op(B) alike.
struct Strided {
  const float* data;
  int64_t row, col;
  float at(int64_t i, int64_t p) const { return data[i * row + p * col]; }
};

#if defined(KDP_X86_KERNELS)
// dst[0, count) = v's first `count` (< 8) lanes, in plain stores of 4, 2
// and 1 (masked stores are microcoded on some CPUs).
__attribute__((target("avx2"))) inline void store_first(float* dst, __m256 v, int count) {
  __m128 part = _mm256_castps256_ps128(v);
  if (count >= 4) {
    _mm_storeu_ps(dst, part);
    part = _mm256_extractf128_ps(v, 1);
    dst += 4;
    count -= 4;
  }
  if (count >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(dst), part);
    part = _mm_movehl_ps(part, part);
    dst += 2;
    count -= 2;
  }
  if (count == 1) _mm_store_ss(dst, part);
}

// dst's 8 rows (row length ldd) = the columns of src's 8 x 8 block (row
// length ld), bits moved as they are. With `height` < 8, src has only that
// many rows and each row of dst gets that many floats (nothing past them is
// read or written).
__attribute__((target("avx2"))) inline void transpose8(const float* src, int64_t ld, float* dst,
                                                       int64_t ldd, int height = 8) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i)
    r[i] = i < height ? _mm256_loadu_ps(src + i * ld) : _mm256_setzero_ps();
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    const __m256 lo = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    const __m256 hi = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    if (height == 8) {
      _mm256_storeu_ps(dst + i * ldd, lo);
      _mm256_storeu_ps(dst + (i + 4) * ldd, hi);
    } else {
      store_first(dst + i * ldd, lo, height);
      store_first(dst + (i + 4) * ldd, hi, height);
    }
  }
}
#endif

// Room for n floats in v: grown where it is short and never shrunk, so that
// a buffer reused by products of changing sizes is not zero-filled again at
// each call (resize value-initializes what it adds, within capacity too).
inline float* room(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

// What an element of C becomes from its sum s: alpha s, one rounding, then
// with beta 0 that alone, with beta 1 C + it, else fma(beta, C, it). C is not
// read with beta 0.
struct Scale {
  float alpha = 1.0f, beta = 0.0f;
  bool identity() const { return alpha == 1.0f && beta == 0.0f; }
  float scaled(float s) const { return alpha == 1.0f ? s : alpha * s; }
  float apply(float s, const float* c) const {
    const float v = scaled(s);
    return beta == 0.0f ? v : beta == 1.0f ? *c + v : std::fma(beta, *c, v);
  }
};

// C (m x n, row length ldc) from the sums s (row length n), as `scale` says.
inline void scale_into(const Scale& scale, const float* s, int64_t m, int64_t n, float* c,
                       int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = scale.apply(s[i * n + j], c + i * ldc + j);
  }
}

// C = alpha op(A) op(B) + beta C (row_gemm's arguments), where sums(m, n,
// k, a, b, c, ldc, scale) makes each element of C from its sum S as `scale`
// says (k > 0). A kernel keeps partial sums in C between blocks of
// `block_k` inner steps, which would overwrite C before beta reads it: with
// beta != 0 and a longer k, the sums go apart first and then one rounding
// each, the same bits.
template <class Sums>
void product(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc, const Sums& sums, int64_t block_k) {
  if (m <= 0 || n <= 0) return;
  const Strided sa{a, trans_a ? 1 : lda, trans_a ? lda : 1};
  const Strided sb{b, trans_b ? 1 : ldb, trans_b ? ldb : 1};
  const Scale scale{alpha, beta};
  if (k > 0 && (beta == 0.0f || k <= block_k)) return sums(m, n, k, sa, sb, c, ldc, scale);
  thread_local std::vector<float> scratch;
  float* s = room(scratch, m * n);
  if (k > 0) {
    sums(m, n, k, sa, sb, s, n, Scale{});
  } else {
    std::fill(s, s + m * n, 0.0f);
  }
  scale_into(scale, s, m, n, c, ldc);
}

}  // namespace kdp::detail::row_gemm_parts
