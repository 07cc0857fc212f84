#include "kernels/native/row_gemm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/cpu_isa.hpp"
#include "kernels/native/row_gemm_parts.hpp"

namespace kdp::detail {

namespace {

using row_gemm_parts::Scale;
using row_gemm_parts::Strided;

// The product's inner dimension is walked in blocks of kKc (a fixed length,
// so that no sum's order depends on m or n); C keeps the partial sums between
// blocks, which a float holds exactly.
constexpr int64_t kKc = 256;

// C from the sums, one element at a time.
void sums_portable(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c, int64_t ldc,
                   Scale scale) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc = std::fma(a.at(i, p), b.at(p, j), acc);
      c[i * ldc + j] = scale.apply(acc, c + i * ldc + j);
    }
  }
}

#if defined(KDP_X86_KERNELS)

using row_gemm_parts::transpose8;

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
KDP_RG_TARGET inline Vec mul(Vec a, Vec b) {
  return _mm256_mul_ps(a, b);
}
KDP_RG_TARGET inline Vec add(Vec a, Vec b) {
  return _mm256_add_ps(a, b);
}
KDP_RG_TARGET inline Vec set1(float x) {
  return _mm256_set1_ps(x);
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
KDP_RG_TARGET inline Vec mul(Vec a, Vec b) {
  return _mm512_mul_ps(a, b);
}
KDP_RG_TARGET inline Vec add(Vec a, Vec b) {
  return _mm512_add_ps(a, b);
}
KDP_RG_TARGET inline Vec set1(float x) {
  return _mm512_set1_ps(x);
}
#include "kernels/native/row_gemm_kernels.inc"
#undef KDP_RG_TARGET
}  // namespace avx512

#endif  // KDP_X86_KERNELS

void sums(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c, int64_t ldc,
          Scale scale) {
#if defined(KDP_X86_KERNELS)
  if (cpu_isa() >= CpuIsa::Avx512) return avx512::sums(m, n, k, a, b, c, ldc, scale);
  if (cpu_isa() >= CpuIsa::Avx2) return avx2::sums(m, n, k, a, b, c, ldc, scale);
#endif
  sums_portable(m, n, k, a, b, c, ldc, scale);
}

}  // namespace

void row_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  row_gemm_parts::product(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, sums,
                          kKc);
}

}  // namespace kdp::detail
