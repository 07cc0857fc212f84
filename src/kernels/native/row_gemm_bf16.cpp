// row_gemm_bf16: row_gemm's promise for bf16 operands with fp32 sums. Each
// element of C is its own chain whatever the rows around it: the inner
// dimension in pairs from p = 0, each pair as AVX512_BF16's vdpbf16ps makes
// it (acc + a(2q+1) b(2q+1), then + a(2q) b(2q), each a fused multiply-add
// whose subnormal result becomes a zero of its sign): vdpbf16ps where the
// CPU has AVX512_BF16, row_gemm's fp32 chains where it has AVX2, else a
// portable loop.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/cpu_isa.hpp"
#include "kernels/native/bf16.hpp"
#include "kernels/native/row_gemm.hpp"
#include "kernels/native/row_gemm_parts.hpp"

namespace kdp::detail {

namespace {

using row_gemm_parts::Scale;
using row_gemm_parts::Strided;

// Inner steps a block of the AVX512_BF16 kernel: even, so no pair straddles
// two.
constexpr int64_t kKc = 512;

// One half of a pair's step: acc + x y rounded once, a subnormal result
// flushed to a zero of its sign.
inline float fma_flushed(float x, float y, float acc) {
  const float r = std::fma(x, y, acc);
  return std::fabs(r) < FLT_MIN ? std::copysign(0.0f, r) : r;
}

// The sums one element at a time, from copies of the operands rounded to bf16.
void sums_portable(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c, int64_t ldc,
                   Scale scale) {
  std::vector<float> ra(static_cast<size_t>(m * k)), rb(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) ra[static_cast<size_t>(i * k + p)] = round_to_bf16(a.at(i, p));
  }
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t j = 0; j < n; ++j) rb[static_cast<size_t>(p * n + j)] = round_to_bf16(b.at(p, j));
  }
  for (int64_t i = 0; i < m; ++i) {
    const float* ai = ra.data() + i * k;
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; p += 2) {
        const bool odd = p + 1 < k;  // else the pair's second half is zero
        acc = fma_flushed(odd ? ai[p + 1] : 0.0f,
                          odd ? rb[static_cast<size_t>((p + 1) * n + j)] : 0.0f, acc);
        acc = fma_flushed(ai[p], rb[static_cast<size_t>(p * n + j)], acc);
      }
      c[i * ldc + j] = scale.apply(acc, c + i * ldc + j);
    }
  }
}

#if defined(KDP_X86_KERNELS)

namespace dot {

#define KDP_BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

constexpr int kMr = 12;       // rows of C's tile: 24 accumulators of 32 registers
constexpr int kNr = 32;       // its columns: two vectors
constexpr int64_t kNc = 512;  // columns of op(B) packed at once

// A pair of the inner dimension as one 32-bit lane: the even step's bf16 in
// the low half (vdpbf16ps's element 2j), the odd one's in the high half.
inline uint32_t pair(uint16_t even, uint16_t odd) {
  return static_cast<uint32_t>(even) | static_cast<uint32_t>(odd) << 16;
}

KDP_BF_TARGET inline __mmask16 lanes_below(int64_t width) {
  return width >= 16  ? __mmask16(0xffff)
         : width <= 0 ? __mmask16(0)
                      : __mmask16((1u << width) - 1u);
}

// C's value from the sums `acc` of its lanes in `m` at c, as `s` says.
KDP_BF_TARGET inline __m512 scaled(__m512 acc, const float* c, __mmask16 m, const Scale& s) {
  const __m512 v = s.alpha == 1.0f ? acc : _mm512_mul_ps(acc, _mm512_set1_ps(s.alpha));
  if (s.beta == 0.0f) return v;
  const __m512 old = _mm512_maskz_loadu_ps(m, c);
  return s.beta == 1.0f ? _mm512_add_ps(old, v) : _mm512_fmadd_ps(_mm512_set1_ps(s.beta), old, v);
}

// R rows x kNr columns of C (`width` real), from 0 (`first`) or from C's
// partial sums, over kq pairs: `ap` holds the rows' pairs as [q][kMr], `bp`
// the columns' as [q][kNr]. `finish`, on the last block: what C becomes from
// the sums (none: the sums themselves).
template <int R>
KDP_BF_TARGET void tile(int64_t kq, const uint32_t* ap, const uint32_t* bp, float* c, int64_t ldc,
                        int64_t width, bool first, const Scale* finish) {
  __m512 acc[R][2];
  const __mmask16 m0 = lanes_below(width), m1 = lanes_below(width - 16);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    acc[r][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, c + r * ldc);
    acc[r][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
  }
  for (int64_t q = 0; q < kq; ++q) {
    const auto b0 = (__m512bh)_mm512_loadu_si512(bp + kNr * q);
    const auto b1 = (__m512bh)_mm512_loadu_si512(bp + kNr * q + 16);
    const uint32_t* aq = ap + kMr * q;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const auto av = (__m512bh)_mm512_set1_epi32(static_cast<int>(aq[r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  if (finish != nullptr) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      acc[r][0] = scaled(acc[r][0], c + r * ldc, m0, *finish);
      acc[r][1] = scaled(acc[r][1], c + r * ldc + 16, m1, *finish);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}
using Tile = void (*)(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, int64_t, bool,
                      const Scale*);
template <size_t... R>
constexpr std::array<Tile, sizeof...(R) + 1> tiles(std::index_sequence<R...>) {
  return {nullptr, &tile<static_cast<int>(R) + 1>...};
}
constexpr auto kTiles = tiles(std::make_index_sequence<kMr>{});  // tile<R> by R

// op(A)'s rows [0, m), inner steps [p0, p0 + kc), as panels of kMr rows, each
// [pair][kMr] (a last panel's missing rows left as they are).
void pack_a(Strided a, int64_t m, int64_t p0, int64_t kc, std::vector<uint32_t>& out,
            std::vector<uint16_t>& even, std::vector<uint16_t>& odd) {
  const int64_t kq = (kc + 1) / 2;
  out.resize(static_cast<size_t>((m + kMr - 1) / kMr * kMr * kq));
  const auto at = [&](int64_t i, int64_t q) -> uint32_t& {
    return out[static_cast<size_t>(i / kMr * kMr * kq + q * kMr + i % kMr)];
  };
  if (a.col == 1) {  // a row of op(A) is contiguous: its bf16 values are its pairs
    even.assign(static_cast<size_t>(2 * kq), 0);
    for (int64_t i = 0; i < m; ++i) {
      to_bf16_host(a.data + i * a.row + p0, even.data(), kc);
      for (int64_t q = 0; q < kq; ++q) {
        at(i, q) = pair(even[static_cast<size_t>(2 * q)], even[static_cast<size_t>(2 * q + 1)]);
      }
    }
    return;
  }
  even.resize(static_cast<size_t>(m));  // stored transposed: a pair from two stored rows
  odd.resize(static_cast<size_t>(m));
  for (int64_t q = 0; q < kq; ++q) {
    to_bf16_host(a.data + (p0 + 2 * q) * a.col, even.data(), m);
    if (2 * q + 1 < kc) {
      to_bf16_host(a.data + (p0 + 2 * q + 1) * a.col, odd.data(), m);
    } else {
      std::fill(odd.begin(), odd.end(), uint16_t{0});
    }
    for (int64_t i = 0; i < m; ++i) {
      at(i, q) = pair(even[static_cast<size_t>(i)], odd[static_cast<size_t>(i)]);
    }
  }
}

// op(B)'s inner steps [p0, p0 + kc) and columns [j0, j0 + nc) as panels of
// kNr columns, each [pair][kNr] (zero past the last column).
KDP_BF_TARGET void pack_b(Strided b, int64_t p0, int64_t kc, int64_t j0, int64_t nc, uint32_t* out,
                          std::vector<uint16_t>& rows) {
  const int64_t kq = (kc + 1) / 2;
  if (b.col == 1) {
    // Rows of op(B) are contiguous: two rows' 16 columns at a time become 16
    // pairs (vcvtne2ps2bf16 rounds as to_bf16; words interleaved).
    alignas(64) static constexpr uint16_t kInterleave[32] = {
        0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i interleave = _mm512_load_si512(kInterleave);
    for (int64_t q = 0; q < kq; ++q) {
      const float* e = b.data + (p0 + 2 * q) * b.row + j0;
      const float* o = 2 * q + 1 < kc ? e + b.row : nullptr;
      for (int64_t jr = 0; jr < nc; jr += kNr) {
        uint32_t* dst = out + jr * kq + kNr * q;
        for (int64_t h = 0; h < kNr; h += 16) {
          const __mmask16 mask = lanes_below(nc - jr - h);
          const __m512 ve = _mm512_maskz_loadu_ps(mask, e + jr + h);
          const __m512 vo =
              o != nullptr ? _mm512_maskz_loadu_ps(mask, o + jr + h) : _mm512_setzero_ps();
          const auto words = (__m512i)_mm512_cvtne2ps_pbh(vo, ve);
          _mm512_storeu_si512(dst + h, _mm512_permutexvar_epi16(interleave, words));
        }
      }
    }
    return;
  }
  // Stored transposed: a column of op(B) is a stored row, whose bf16 values
  // are its pairs; 32 of them side by side, then 8 x 8 blocks of pairs turned.
  const int64_t len = 2 * kq;
  rows.resize(static_cast<size_t>(kNr * len));
  for (int64_t jr = 0; jr < nc; jr += kNr) {
    const int64_t width = std::min<int64_t>(kNr, nc - jr);
    for (int64_t j = 0; j < kNr; ++j) {
      uint16_t* row = rows.data() + j * len;
      if (j < width) {
        to_bf16_host(b.data + (j0 + jr + j) * b.col + p0, row, kc);
        if (kc < len) row[kc] = 0;
      } else {
        std::fill(row, row + len, uint16_t{0});
      }
    }
    const auto* pairs = reinterpret_cast<const float*>(rows.data());  // bits moved as they are
    auto* dst = reinterpret_cast<float*>(out + jr * kq);
    int64_t q = 0;
    for (; q + 8 <= kq; q += 8) {
      for (int64_t j = 0; j < kNr; j += 8) {
        row_gemm_parts::transpose8(pairs + j * kq + q, kq, dst + kNr * q + j, kNr);
      }
    }
    for (; q < kq; ++q) {
      for (int64_t j = 0; j < kNr; ++j) {
        std::memcpy(dst + kNr * q + j, pairs + j * kq + q, sizeof(float));
      }
    }
  }
}

KDP_BF_TARGET void sums(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c,
                        int64_t ldc, Scale scale) {
  thread_local std::vector<uint32_t> packed_a, packed_b;
  thread_local std::vector<uint16_t> even, odd;
  packed_b.resize(static_cast<size_t>(kKc / 2 * kNc));
  const int64_t whole = m / kMr * kMr;
  for (int64_t pc = 0; pc < k; pc += kKc) {
    const int64_t kc = std::min(kKc, k - pc), kq = (kc + 1) / 2;
    pack_a(a, m, pc, kc, packed_a, even, odd);
    const Scale* finish = pc + kc >= k && !scale.identity() ? &scale : nullptr;
    for (int64_t jc = 0; jc < n; jc += kNc) {
      const int64_t nc = std::min(kNc, n - jc);
      pack_b(b, pc, kc, jc, nc, packed_b.data(), even);
      for (int64_t jr = 0; jr < nc; jr += kNr) {
        const int64_t width = std::min<int64_t>(kNr, nc - jr);
        const uint32_t* bp = packed_b.data() + jr * kq;
        float* cb = c + jc + jr;
        for (int64_t i = 0; i < whole; i += kMr) {
          tile<kMr>(kq, packed_a.data() + i * kq, bp, cb + i * ldc, ldc, width, pc == 0, finish);
        }
        if (m > whole) {
          kTiles[m - whole](kq, packed_a.data() + whole * kq, bp, cb + whole * ldc, ldc, width,
                            pc == 0, finish);
        }
      }
    }
  }
}

#undef KDP_BF_TARGET

}  // namespace dot

// Without AVX512_BF16: row_gemm's fp32 chains on copies of the operands
// rounded to bf16, each pair of the inner dimension swapped (2q + 1 before
// 2q, a zero before a missing last one), so that each element's chain is the
// pairs' fused multiply-adds in vdpbf16ps's order. Where no sum on the way is
// subnormal that is the promise. Where one is, the flush decides the bits:
// the CPU raises its denormal flag when a later step reads such a sum and its
// underflow flag when one was rounded, the last sums are looked at, and the
// portable loop makes those products instead.
namespace chains {

// out[p ^ 1] = in[p] rounded, for p < k; a zero at k - 1 for an odd k. A
// stretch at a time, rounded into a buffer that stays in the L1 cache.
__attribute__((target("avx2"))) void swap_pairs(const float* in, int64_t k, float* out) {
  constexpr int64_t kStretch = 512;  // even, so that no pair straddles two
  alignas(32) float r[kStretch];
  for (int64_t p0 = 0; p0 < k; p0 += kStretch) {
    const int64_t len = std::min(kStretch, k - p0);
    round_to_bf16_host(in + p0, r, len);
    int64_t p = 0;
    for (; p + 8 <= len; p += 8) {
      _mm256_storeu_ps(out + p0 + p, _mm256_permute_ps(_mm256_load_ps(r + p), 0xb1));  // 1 0 3 2
    }
    for (; p < len; ++p) out[p0 + (p ^ 1)] = r[p];
  }
  if (k % 2 != 0) out[k - 1] = 0.0f;
}

// An operand rounded and pair-swapped, as row_gemm reads it: `lines` x k2
// with the inner steps side by side, or k2 x `lines` stored transposed.
struct Copy {
  std::vector<float> data;
  int64_t ld = 0;
  bool steps_side_by_side = true;
};

// The `lines` lines (rows of op(A), columns of op(B)) of k inner steps, line
// i's step p at data[i * line + p * step] (line or step 1).
void copy(const float* data, int64_t line, int64_t step, int64_t lines, int64_t k, Copy& out) {
  const int64_t k2 = k + k % 2;
  out.steps_side_by_side = step == 1;
  if (out.steps_side_by_side) {
    out.ld = k2;
    row_gemm_parts::room(out.data, lines * k2);
    for (int64_t i = 0; i < lines; ++i) {
      swap_pairs(data + i * line, k, out.data.data() + i * k2);
    }
    return;
  }
  // Step p's lines side by side as stored row p ^ 1, in rows a length off a
  // multiple of 512 bytes apart (which row_gemm reads in place).
  out.ld = lines % 128 == 0 ? lines + 16 : lines;
  row_gemm_parts::room(out.data, k2 * out.ld);
  for (int64_t p = 0; p < k; ++p) {
    round_to_bf16_host(data + p * step, out.data.data() + (p ^ 1) * out.ld, lines);
  }
  if (k % 2 != 0) std::fill_n(out.data.data() + (k - 1) * out.ld, lines, 0.0f);
}

// The fp32 chains into s (m x n, row length lds), a call of its own so that
// the CPU's flags are read after every step of them.
__attribute__((noinline)) void chain(int64_t m, int64_t n, int64_t k2, const Copy& a, const Copy& b,
                                     float* s, int64_t lds) {
  row_gemm(!a.steps_side_by_side, b.steps_side_by_side, m, n, k2, 1.0f, a.data.data(), a.ld,
           b.data.data(), b.ld, 0.0f, s, lds);
}

// Whether any of s's m x n sums (row length lds) is subnormal: every one
// looked at, with no early exit, so that the loop vectorizes.
__attribute__((target("avx2"))) bool any_subnormal(const float* s, int64_t m, int64_t n,
                                                   int64_t lds) {
  int found = 0;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = s + i * lds;
    for (int64_t j = 0; j < n; ++j) {
      found |= static_cast<int>(row[j] != 0.0f) & static_cast<int>(std::fabs(row[j]) < FLT_MIN);
    }
  }
  return found != 0;
}

void sums(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c, int64_t ldc,
          Scale scale) {
  thread_local Copy ca, cb;
  thread_local std::vector<float> scratch;
  copy(a.data, a.row, a.col, m, k, ca);
  copy(b.data, b.col, b.row, n, k, cb);
  // With alpha 1 and beta 0 the sums are C itself (the portable loop
  // overwrites them where one was flushed); else they go apart first, since
  // beta reads C.
  const bool in_place = scale.identity();
  float* s = in_place ? c : row_gemm_parts::room(scratch, m * n);
  const int64_t lds = in_place ? ldc : n;
  // The chains with the flags clear, rounding to nearest and gradual
  // underflow, whatever the caller set; its state back afterwards.
  constexpr unsigned kFlags = _MM_EXCEPT_DENORM | _MM_EXCEPT_UNDERFLOW;
  constexpr unsigned kModes = _MM_ROUND_MASK | _MM_FLUSH_ZERO_MASK | _MM_DENORMALS_ZERO_MASK;
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr & ~(kFlags | kModes));
  chain(m, n, k + k % 2, ca, cb, s, lds);
  const bool flushed = (_mm_getcsr() & kFlags) != 0 || any_subnormal(s, m, n, lds);
  _mm_setcsr(csr);
  if (flushed) return sums_portable(m, n, k, a, b, c, ldc, scale);
  if (!in_place) row_gemm_parts::scale_into(scale, s, m, n, c, ldc);
}

}  // namespace chains

#endif  // KDP_X86_KERNELS

// The sums on the widest path here (row_gemm_bf16_fast: the header's).
void sums(int64_t m, int64_t n, int64_t k, Strided a, Strided b, float* c, int64_t ldc,
          Scale scale) {
#if defined(KDP_X86_KERNELS)
  if (cpu_isa() >= CpuIsa::Avx512Bf16) return dot::sums(m, n, k, a, b, c, ldc, scale);
  if (cpu_isa() >= CpuIsa::Avx2) return chains::sums(m, n, k, a, b, c, ldc, scale);
#endif
  sums_portable(m, n, k, a, b, c, ldc, scale);
}

}  // namespace

bool row_gemm_bf16_fast() {
#if defined(KDP_X86_KERNELS)
  return cpu_isa() >= CpuIsa::Avx2;
#else
  return false;
#endif
}

void row_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc) {
  row_gemm_parts::product(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, sums,
                          kKc);
}

}  // namespace kdp::detail
