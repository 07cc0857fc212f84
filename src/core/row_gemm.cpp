#include "core/row_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_isa.hpp"

// The vector kernel needs x86-64 intrinsics compiled for AVX2 and FMA inside
// an otherwise baseline build (GCC or clang target attributes).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    !defined(__HIPCC__) && !defined(KDP_PORTABLE_KERNELS)
#define KDP_ROW_GEMM_AVX2 1
#include <immintrin.h>
#endif

namespace kdp::detail {

namespace {

// The product's inner dimension is walked in blocks of kKc (a fixed length,
// so that no sum's order depends on m or n); C keeps the partial sums between
// blocks, which a float holds exactly.
constexpr int64_t kKc = 256;

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

#if defined(KDP_ROW_GEMM_AVX2)

#define KDP_AVX2 __attribute__((target("avx2,fma")))

constexpr int64_t kNc = 512;  // columns of op(B) packed at once
constexpr int kMr = 6;        // rows of C's tile
constexpr int kNr = 16;       // its columns: two vectors

KDP_AVX2 inline __m256i lane_mask(int64_t width) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(width)), lanes);
}

// R rows x 16 columns of C (`width` of them real): from 0 (`first`) or from
// C's partial sums, one fused multiply-add per p of the block. `bp` is the
// packed panel of op(B): kc rows of 16.
template <int R>
KDP_AVX2 void tile(int64_t kc, Strided a, const float* bp, float* c, int64_t ldc, int64_t width,
                   bool first) {
  __m256 acc[R][2];
  const __m256i m0 = lane_mask(width), m1 = lane_mask(width - 8);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (first) {
      acc[r][0] = _mm256_setzero_ps();
      acc[r][1] = _mm256_setzero_ps();
    } else if (width == kNr) {
      acc[r][0] = _mm256_loadu_ps(cr);
      acc[r][1] = _mm256_loadu_ps(cr + 8);
    } else {
      acc[r][0] = _mm256_maskload_ps(cr, m0);
      acc[r][1] = _mm256_maskload_ps(cr + 8, m1);
    }
  }
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(bp + kNr * p), b1 = _mm256_loadu_ps(bp + kNr * p + 8);
    const float* ap = a.data + p * a.col;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r * a.row);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (width == kNr) {
      _mm256_storeu_ps(cr, acc[r][0]);
      _mm256_storeu_ps(cr + 8, acc[r][1]);
    } else {
      _mm256_maskstore_ps(cr, m0, acc[r][0]);
      _mm256_maskstore_ps(cr + 8, m1, acc[r][1]);
    }
  }
}

// op(B)'s rows [p0, p0 + kc) and columns [j0, j0 + nc) as panels of 16
// columns, each kc x 16 (zero past the last column).
KDP_AVX2 void pack(Strided b, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  for (int64_t jr = 0; jr < nc; jr += kNr) {
    float* dst = out + jr * kc;
    const int64_t width = std::min<int64_t>(kNr, nc - jr);
    if (b.col == 1 && width == kNr) {  // rows of op(B) are contiguous
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = b.data + (p0 + p) * b.row + j0 + jr;
        _mm256_storeu_ps(dst + kNr * p, _mm256_loadu_ps(src));
        _mm256_storeu_ps(dst + kNr * p + 8, _mm256_loadu_ps(src + 8));
      }
      continue;
    }
    for (int64_t j = 0; j < kNr; ++j) {
      for (int64_t p = 0; p < kc; ++p) {
        dst[kNr * p + j] = j < width ? b.at(p0 + p, j0 + jr + j) : 0.0f;
      }
    }
  }
}

// The tile of each row count, 1 to kMr.
using Tile = void (*)(int64_t, Strided, const float*, float*, int64_t, int64_t, bool);
constexpr Tile kTiles[kMr + 1] = {nullptr,  &tile<1>, &tile<2>, &tile<3>,
                                  &tile<4>, &tile<5>, &tile<6>};

KDP_AVX2 void sums_avx2(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c,
                        int64_t ldc) {
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(kKc * kNc));
  float* packed = buffer.data();
  for (int64_t pc = 0; pc < k; pc += kKc) {
    const int64_t kc = std::min(kKc, k - pc);
    const Strided ab{a.data + pc * a.col, a.row, a.col};
    for (int64_t jc = 0; jc < n; jc += kNc) {
      const int64_t nc = std::min(kNc, n - jc);
      pack(b, pc, kc, jc, nc, packed);
      for (int64_t jr = 0; jr < nc; jr += kNr) {
        const int64_t width = std::min<int64_t>(kNr, nc - jr);
        const float* bp = packed + jr * kc;
        float* cb = c + jc + jr;
        for (int64_t i = 0; i < m; i += kMr) {
          const auto rows = static_cast<size_t>(std::min<int64_t>(kMr, m - i));
          kTiles[rows](kc, Strided{ab.data + i * ab.row, ab.row, ab.col}, bp, cb + i * ldc, ldc,
                       width, pc == 0);
        }
      }
    }
  }
}

#undef KDP_AVX2

#endif  // KDP_ROW_GEMM_AVX2

void sums(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c, int64_t ldc) {
#if defined(KDP_ROW_GEMM_AVX2)
  if (row_gemm_vectorized()) return sums_avx2(m, n, k, a, b, c, ldc);
#endif
  sums_portable(m, n, k, a, b, c, ldc);
}

}  // namespace

bool row_gemm_vectorized() {
#if defined(KDP_ROW_GEMM_AVX2)
  return cpu_isa() >= CpuIsa::Avx2;
#else
  return false;
#endif
}

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
  scratch.assign(static_cast<size_t>(m * n), 0.0f);
  if (k > 0) sums(m, n, k, sa, sb, scratch.data(), n);
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
