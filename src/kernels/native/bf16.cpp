#include "kernels/native/bf16.hpp"

#include "core/cpu_isa.hpp"

#if defined(KDP_X86_KERNELS)
#include <immintrin.h>
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(),
// which its -Wmaybe-uninitialized takes for a read of an uninitialised value
// (GCC bug 105593, fixed in 12.3).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace kdp::detail {

namespace {

void to_bf16_scalar(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

#if defined(KDP_X86_KERNELS)

// Sixteen floats to bf16 with AVX-512's integer operations, as to_bf16().
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m256i sixteen_to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i magnitude = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
  const __mmask16 tiny =
      _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));  // zero exponent
  r = _mm512_mask_and_epi32(r, tiny, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000));
  return _mm512_cvtepi32_epi16(r);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void to_bf16_avx512(const float* in,
                                                                         uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        sixteen_to_bf16(_mm512_loadu_ps(in + i)));
  }
  if (i < n) {
    const __mmask16 rest = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m256i r = sixteen_to_bf16(_mm512_maskz_loadu_ps(rest, in + i));
    _mm256_mask_storeu_epi16(out + i, rest, r);
  }
}

// out = in rounded to bf16, as floats.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void round_bf16_avx512(const float* in,
                                                                            float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_cvtepu16_epi32(sixteen_to_bf16(_mm512_loadu_ps(in + i)));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(bits, 16));
  }
  for (; i < n; ++i) out[i] = round_to_bf16(in[i]);
}

// Eight floats rounded to bf16 with AVX2's integer operations, as
// from_bf16(to_bf16()), as floats' bits.
__attribute__((target("avx2"))) inline __m256i eight_rounded(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), high);
  const __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_and_si256(u, high), _mm256_set1_epi32(0x00400000));
  r = _mm256_blendv_epi8(r, quiet, nan);
  const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)),
                                          _mm256_setzero_si256());  // zero exponent
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm256_blendv_epi8(r, sign, tiny);
}

// out = in rounded to bf16, as floats.
__attribute__((target("avx2"))) void round_bf16_avx2(const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        eight_rounded(_mm256_loadu_ps(in + i)));
  }
  for (; i < n; ++i) out[i] = round_to_bf16(in[i]);
}

// vcvtne2ps2bf16 rounds as to_bf16() does (ties to even, denormals to zero,
// NaN quiet); 32 floats per instruction.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void to_bf16_avx512bf16(
    const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh pair =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(pair));
  }
  if (i < n) to_bf16_avx512(in + i, out + i, n - i);
}

#endif

}  // namespace

void to_bf16_host(const float* in, uint16_t* out, int64_t n) {
#if defined(KDP_X86_KERNELS)
  const CpuIsa isa = cpu_isa();
  if (isa >= CpuIsa::Avx512Bf16) return to_bf16_avx512bf16(in, out, n);
  if (isa >= CpuIsa::Avx512) return to_bf16_avx512(in, out, n);
#endif
  to_bf16_scalar(in, out, n);
}

void round_to_bf16_host(const float* in, float* out, int64_t n) {
#if defined(KDP_X86_KERNELS)
  if (cpu_isa() >= CpuIsa::Avx512) return round_bf16_avx512(in, out, n);
  if (cpu_isa() >= CpuIsa::Avx2) return round_bf16_avx2(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = round_to_bf16(in[i]);
}

}  // namespace kdp::detail
