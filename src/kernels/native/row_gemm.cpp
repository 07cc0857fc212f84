#include "kernels/native/row_gemm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "core/cpu_isa.hpp"

#if defined(KDP_X86_KERNELS)
#include <immintrin.h>
#endif

namespace kdp::detail {

namespace {

// op(A)(i, p) = data[i * row + p * col]; op(B) alike.
struct Strided {
  const float* data;
  int64_t row, col;
  float at(int64_t i, int64_t p) const { return data[i * row + p * col]; }
};

// C = the sums alone (alpha 1, beta 0), one element at a time.
void sums_portable(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc = std::fma(a.at(i, p), b.at(p, j), acc);
      c[i * ldc + j] = acc;
    }
  }
}

#if defined(KDP_X86_KERNELS)

// The product's inner dimension is walked in blocks of kKc (a fixed length,
// so that no sum's order depends on m or n); C keeps the partial sums between
// blocks, which a float holds exactly.
constexpr int64_t kKc = 256;

// dst's 8 rows (row length ldd) = the columns of src's 8 x 8 block (row
// length ld): both kernels pack a transposed op(B) with it.
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

// AVX2 and FMA: 8 floats a vector.
namespace avx2 {
#define KDP_RG_TARGET __attribute__((target("avx2,fma")))
using Vec = __m256;
using Mask = __m256i;
constexpr int kLanes = 8;
KDP_RG_TARGET inline Mask lanes_below(int64_t width) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(width)), lanes);
}
KDP_RG_TARGET inline Vec load(const float* p) {
  return _mm256_loadu_ps(p);
}
KDP_RG_TARGET inline Vec load_masked(const float* p, Mask m) {
  return _mm256_maskload_ps(p, m);
}
KDP_RG_TARGET inline void store(float* p, Vec v) {
  _mm256_storeu_ps(p, v);
}
KDP_RG_TARGET inline void store_masked(float* p, Mask m, Vec v) {
  _mm256_maskstore_ps(p, m, v);
}
KDP_RG_TARGET inline Vec broadcast(const float* p) {
  return _mm256_broadcast_ss(p);
}
KDP_RG_TARGET inline Vec zero() {
  return _mm256_setzero_ps();
}
KDP_RG_TARGET inline Vec fma(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
#include "kernels/native/row_gemm_kernels.inc"
#undef KDP_RG_TARGET
}  // namespace avx2

// AVX-512: 16 floats a vector (twice the peak where a core has two 512-bit
// FMA units).
namespace avx512 {
#define KDP_RG_TARGET __attribute__((target("avx512f,avx2,fma")))
using Vec = __m512;
using Mask = __mmask16;
constexpr int kLanes = 16;
KDP_RG_TARGET inline Mask lanes_below(int64_t width) {
  return width >= kLanes ? Mask(0xffff) : width <= 0 ? Mask(0) : Mask((1u << width) - 1u);
}
KDP_RG_TARGET inline Vec load(const float* p) {
  return _mm512_loadu_ps(p);
}
KDP_RG_TARGET inline Vec load_masked(const float* p, Mask m) {
  return _mm512_maskz_loadu_ps(m, p);
}
KDP_RG_TARGET inline void store(float* p, Vec v) {
  _mm512_storeu_ps(p, v);
}
KDP_RG_TARGET inline void store_masked(float* p, Mask m, Vec v) {
  _mm512_mask_storeu_ps(p, m, v);
}
KDP_RG_TARGET inline Vec broadcast(const float* p) {
  return _mm512_set1_ps(*p);
}
KDP_RG_TARGET inline Vec zero() {
  return _mm512_setzero_ps();
}
KDP_RG_TARGET inline Vec fma(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
#include "kernels/native/row_gemm_kernels.inc"
#undef KDP_RG_TARGET
}  // namespace avx512

#endif  // KDP_X86_KERNELS

void sums(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c, int64_t ldc) {
#if defined(KDP_X86_KERNELS)
  if (cpu_isa() >= CpuIsa::Avx512) return avx512::sums(m, n, k, a, b, c, ldc);
  if (cpu_isa() >= CpuIsa::Avx2) return avx2::sums(m, n, k, a, b, c, ldc);
#endif
  sums_portable(m, n, k, a, b, c, ldc);
}

}  // namespace

void row_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const Strided sa{a, trans_a ? 1 : lda, trans_a ? lda : 1};
  const Strided sb{b, trans_b ? 1 : ldb, trans_b ? ldb : 1};
  if (alpha == 1.0f && beta == 0.0f) {
    if (k <= 0) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
      return;
    }
    return sums(m, n, k, sa, sb, c, ldc);
  }
  // The sums apart, then C = alpha sums + beta C in one rounding each (the
  // same whichever path made the sums).
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(m * n));
  if (k > 0) {
    sums(m, n, k, sa, sb, scratch.data(), n);
  } else {
    std::fill(scratch.begin(), scratch.end(), 0.0f);
  }
  for (int64_t i = 0; i < m; ++i) {
    const float* s = scratch.data() + i * n;
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) {
      const float scaled = alpha == 1.0f ? s[j] : alpha * s[j];
      ci[j] = beta == 0.0f ? scaled : beta == 1.0f ? ci[j] + scaled : std::fma(beta, ci[j], scaled);
    }
  }
}

}  // namespace kdp::detail
