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
// dst's 8 rows (row length ldd) = the columns of src's 8 x 8 block (row
// length ld), bits moved as they are.
__attribute__((target("avx2"))) inline void transpose8(const float* src, int64_t ld, float* dst,
                                                       int64_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
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
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

// C = alpha op(A) op(B) + beta C (row_gemm's arguments), where sums(m, n,
// k, a, b, out, ld) writes the sums S (m x n, k > 0) to `out`: with alpha 1
// and beta 0 straight into C, else apart and then one rounding each (the
// same whichever path made the sums).
template <class Sums>
void product(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc, const Sums& sums) {
  if (m <= 0 || n <= 0) return;
  const Strided sa{a, trans_a ? 1 : lda, trans_a ? lda : 1};
  const Strided sb{b, trans_b ? 1 : ldb, trans_b ? ldb : 1};
  const auto into = [&](float* out, int64_t ld) {
    if (k > 0) return sums(m, n, k, sa, sb, out, ld);
    for (int64_t i = 0; i < m; ++i) std::fill(out + i * ld, out + i * ld + n, 0.0f);
  };
  if (alpha == 1.0f && beta == 0.0f) return into(c, ldc);
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(m * n));
  into(scratch.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    const float* s = scratch.data() + i * n;
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) {
      const float v = alpha == 1.0f ? s[j] : alpha * s[j];
      ci[j] = beta == 0.0f ? v : beta == 1.0f ? ci[j] + v : std::fma(beta, ci[j], v);
    }
  }
}

}  // namespace kdp::detail::row_gemm_parts
