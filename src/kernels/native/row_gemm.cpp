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

// D (+)= the shards' sums, each rounded by magic, one element at a time.
void shard_sums_portable(int64_t m, int64_t n, const int64_t* starts, int shards, Strided a,
                         Strided b, double magic, double* d, int64_t ldd, bool add) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = add ? d[i * ldd + j] : 0.0;
      for (int t = 0; t < shards; ++t) {
        float acc = 0.0f;
        for (int64_t p = starts[t]; p < starts[t + 1]; ++p)
          acc = std::fma(a.at(i, p), b.at(p, j), acc);
        sum += (static_cast<double>(acc) + magic) - magic;
      }
      d[i * ldd + j] = sum;
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
// Double vectors of half a Vec: lo += (v's first half + m) - m in double,
// hi += the same of its second half; d (+)= v.
using DVec = __m256d;
struct Rounding {
  DVec m;
  KDP_RG_TARGET explicit Rounding(double magic) : m(_mm256_set1_pd(magic)) {}
};
KDP_RG_TARGET inline DVec dzero() {
  return _mm256_setzero_pd();
}
KDP_RG_TARGET inline void add_rounded(DVec& lo, DVec& hi, Vec v, const Rounding& r) {
  lo = _mm256_add_pd(
      lo, _mm256_sub_pd(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), r.m), r.m));
  hi = _mm256_add_pd(
      hi, _mm256_sub_pd(_mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), r.m), r.m));
}
KDP_RG_TARGET inline void dstore(double* d, DVec v, const Rounding&, bool add) {
  _mm256_storeu_pd(d, add ? _mm256_add_pd(_mm256_loadu_pd(d), v) : v);
}
#include "kernels/native/row_gemm_kernels.inc"
#undef KDP_RG_TARGET
}  // namespace avx2

// AVX-512: 16 floats a vector (twice the peak where a core has two 512-bit
// FMA units).
namespace avx512 {
#define KDP_RG_TARGET __attribute__((target("avx512f,avx512dq,avx2,fma")))
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
// The rounded values in grid units, as 64-bit integers: v times 2^-q (q
// the grid's exponent; exact, or below 2^-126 and so rounded to 0 either
// way) converted with the rounding to nearest even, which is what (v + m) -
// m does in double; |v| / 2^q < 2^51, so the integers' sums are exact too,
// and their double times 2^q is the double path's sum, bit for bit (0 is
// +0). For grids whose scale is a normal float (integer_grid()).
using DVec = __m512i;
struct Rounding {
  __m512 scale;
  __m512d grid;
  KDP_RG_TARGET explicit Rounding(double magic)
      : scale(_mm512_set1_ps(static_cast<float>(1.5 * 0x1p52 / magic))),
        grid(_mm512_set1_pd(magic / (1.5 * 0x1p52))) {}
};
KDP_RG_TARGET inline DVec dzero() {
  return _mm512_setzero_si512();
}
KDP_RG_TARGET inline void add_rounded(DVec& lo, DVec& hi, Vec v, const Rounding& r) {
  // (The zero-masked extractions: GCC's plain ones read an "undefined"
  // vector that -Wmaybe-uninitialized reports.)
  const __m512d units = _mm512_castps_pd(_mm512_mul_ps(v, r.scale));
  lo = _mm512_add_epi64(
      lo, _mm512_cvtps_epi64(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, units, 0))));
  hi = _mm512_add_epi64(
      hi, _mm512_cvtps_epi64(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, units, 1))));
}
KDP_RG_TARGET inline void dstore(double* d, DVec v, const Rounding& r, bool add) {
  const __m512d value = _mm512_mul_pd(_mm512_cvtepi64_pd(v), r.grid);
  _mm512_storeu_pd(d, add ? _mm512_add_pd(_mm512_loadu_pd(d), value) : value);
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

#if defined(KDP_X86_KERNELS)
// Whether the AVX-512 kernel's integer rounding serves the grid that `magic`
// (1.5 2^(q + 52)) sets: 2^-q a normal float, and q small enough that no
// product it bounds reaches a float's range (the bound is below 2^(q + 51)).
bool integer_grid(double magic) {
  const int q = std::ilogb(magic) - 52;
  return q >= -126 && q <= 60;
}
#endif

void shard_sums(int64_t m, int64_t n, const int64_t* starts, int shards, Strided a, Strided b,
                double magic, double* d, int64_t ldd, bool add) {
#if defined(KDP_X86_KERNELS)
  if (cpu_isa() >= CpuIsa::Avx512 && integer_grid(magic))
    return avx512::shard_sums(m, n, starts, shards, a, b, magic, d, ldd, add);
  if (cpu_isa() >= CpuIsa::Avx2)
    return avx2::shard_sums(m, n, starts, shards, a, b, magic, d, ldd, add);
#endif
  shard_sums_portable(m, n, starts, shards, a, b, magic, d, ldd, add);
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

void row_gemm_shard_sums(bool trans_a, bool trans_b, int64_t m, int64_t n, const int64_t* starts,
                         int shards, const float* a, int64_t lda, const float* b, int64_t ldb,
                         double magic, double* d, int64_t ldd, bool add) {
  if (m <= 0 || n <= 0) return;
  if (shards <= 0) {
    if (!add) {
      for (int64_t i = 0; i < m; ++i) std::fill(d + i * ldd, d + i * ldd + n, 0.0);
    }
    return;
  }
  const Strided sa{a, trans_a ? 1 : lda, trans_a ? lda : 1};
  const Strided sb{b, trans_b ? 1 : ldb, trans_b ? ldb : 1};
  shard_sums(m, n, starts, shards, sa, sb, magic, d, ldd, add);
}

}  // namespace kdp::detail
