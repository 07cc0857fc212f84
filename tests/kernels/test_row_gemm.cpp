// row_gemm: every element is the fused multiply-adds of its row and column in
// the order of the inner index (so a row's bits do not depend on the rows
// around it), on the AVX-512, AVX2 and portable paths alike. row_gemm_bf16:
// every element its own chain over the bf16-rounded operands, the inner
// dimension in pairs (the odd step first, each a fused multiply-add whose
// subnormal result is flushed), on the vdpbf16ps, fp32-chain and portable
// paths alike.
#include "kernels/native/row_gemm.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "core/cpu_isa.hpp"
#include "kernels/native/bf16.hpp"

using kdp::detail::CpuIsa;
using kdp::detail::round_to_bf16;
using kdp::detail::row_gemm;
using kdp::detail::row_gemm_bf16;

namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
};

struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;
};

// A row length for `cols` columns: `pad` more, or with kAligned the next
// multiple of 128 floats (512 bytes: rows that share the L1 cache's sets,
// which row_gemm packs where it reads others in place).
constexpr int64_t kAligned = -1;
int64_t row_length(int64_t cols, int64_t pad) {
  return pad == kAligned ? (cols + 127) / 128 * 128 : cols + pad;
}

// Values in [-1, 1) times 2^scale; with bf16 in mind, every 97th a subnormal
// float (which bf16 rounding makes a zero of its sign).
Operands operands(const Case& s, int64_t pad, float beta, unsigned seed, int scale = 0,
                  bool subnormals = false) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
  const int64_t b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
  Operands o{row_length(a_cols, pad), row_length(b_cols, pad), row_length(s.n, pad), {}, {}, {}};
  o.a.resize(static_cast<size_t>(a_rows * o.lda));
  o.b.resize(static_cast<size_t>(b_rows * o.ldb));
  o.c.resize(static_cast<size_t>(s.m * o.ldc));
  size_t count = 0;
  const auto value = [&] {
    if (subnormals && ++count % 97 == 0) return std::ldexp(u(gen), -130);
    return std::ldexp(u(gen), scale);
  };
  for (float& x : o.a) x = value();
  for (float& x : o.b) x = value();
  for (float& x : o.c) x = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : u(gen);
  return o;
}

// What row_gemm promises, element by element: fma(a, b, acc) from acc = 0 in
// the order of p, then alpha times that and beta C added, each rounded once.
std::vector<float> promised(const Case& s, float alpha, float beta, const Operands& o) {
  std::vector<float> out = o.c;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < s.k; ++p) {
        const float x = s.ta ? o.a[static_cast<size_t>(p * o.lda + i)]
                             : o.a[static_cast<size_t>(i * o.lda + p)];
        const float y = s.tb ? o.b[static_cast<size_t>(j * o.ldb + p)]
                             : o.b[static_cast<size_t>(p * o.ldb + j)];
        acc = std::fma(x, y, acc);
      }
      float& c = out[static_cast<size_t>(i * o.ldc + j)];
      const float scaled = alpha == 1.0f ? acc : alpha * acc;
      c = beta == 0.0f ? scaled : std::fma(beta, c, scaled);
    }
  }
  return out;
}

// Bitwise equality, NaN padding included.
bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

std::vector<float> run(const Case& s, float alpha, float beta, const Operands& o) {
  std::vector<float> got = o.c;
  row_gemm(s.ta, s.tb, s.m, s.n, s.k, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, beta, got.data(),
           o.ldc);
  return got;
}

// Each shape {m, n, k} in each transposition.
std::vector<Case> cases(const std::vector<std::array<int64_t, 3>>& shapes) {
  std::vector<Case> out;
  for (int t = 0; t < 4; ++t) {
    for (const auto& sh : shapes) out.push_back({(t & 1) != 0, (t & 2) != 0, sh[0], sh[1], sh[2]});
  }
  return out;
}

// Shapes across every edge of the fp32 kernels' tiles (6 rows with AVX2, 12
// with AVX-512; 16 and 32 columns: whole panels of op(B), which it may read
// in place, and partial ones) and blocks (256 inner steps, 512 columns).
const std::vector<std::array<int64_t, 3>> kShapes = {{1, 1, 1},     {5, 17, 3},    {6, 16, 256},
                                                     {7, 15, 257},  {13, 33, 600}, {12, 530, 40},
                                                     {20, 10, 784}, {35, 47, 19},  {13, 64, 300}};

// Runs f with cpu_isa() capped at `cap`, then restores the cap.
template <class F>
void with_isa(CpuIsa cap, const F& f) {
  const CpuIsa before = kdp::detail::set_cpu_isa_limit(cap);
  f();
  kdp::detail::set_cpu_isa_limit(before);
}

float flushed(float x) {
  return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x;
}

// The promise, element by element: acc = 0; for each pair q, acc = flushed
// fma(a(2q+1), b(2q+1), acc) (zero times zero past the end), then the same
// with a(2q), b(2q), on the operands rounded to bf16; then alpha and beta as
// row_gemm applies them.
std::vector<float> promised_bf16(const Case& s, float alpha, float beta, const Operands& o) {
  const auto a = [&](int64_t i, int64_t p) {
    return round_to_bf16(s.ta ? o.a[static_cast<size_t>(p * o.lda + i)]
                              : o.a[static_cast<size_t>(i * o.lda + p)]);
  };
  const auto b = [&](int64_t p, int64_t j) {
    return round_to_bf16(s.tb ? o.b[static_cast<size_t>(j * o.ldb + p)]
                              : o.b[static_cast<size_t>(p * o.ldb + j)]);
  };
  std::vector<float> out = o.c;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < s.k; p += 2) {
        acc = p + 1 < s.k ? flushed(std::fma(a(i, p + 1), b(p + 1, j), acc))
                          : flushed(std::fma(0.0f, 0.0f, acc));
        acc = flushed(std::fma(a(i, p), b(p, j), acc));
      }
      float& c = out[static_cast<size_t>(i * o.ldc + j)];
      const float scaled = alpha == 1.0f ? acc : alpha * acc;
      c = beta == 0.0f ? scaled : beta == 1.0f ? c + scaled : std::fma(beta, c, scaled);
    }
  }
  return out;
}

std::vector<float> run_bf16(const Case& s, float alpha, float beta, const Operands& o) {
  std::vector<float> got = o.c;
  row_gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, beta,
                got.data(), o.ldc);
  return got;
}

// Shapes across the bf16 kernel's tile (12 rows, 16 and 32 columns), its
// blocks (512 inner steps, 512 columns) and odd inner lengths.
const std::vector<std::array<int64_t, 3>> kBf16Shapes = {
    {1, 1, 1},      {5, 17, 3},    {12, 32, 512}, {7, 15, 513},
    {13, 33, 1030}, {12, 530, 40}, {25, 10, 785}, {35, 47, 19}};

}  // namespace

TEST(RowGemm, IsTheFusedSumOfEveryElementOnEveryPath) {
  for (CpuIsa cap : {CpuIsa::Amx, CpuIsa::Avx2, CpuIsa::Baseline}) {
    with_isa(cap, [&] {
      unsigned seed = 1;
      for (const Case& s : cases(kShapes)) {
        for (const int64_t pad : {int64_t{3}, kAligned}) {
          for (const auto& [alpha, beta] :
               {std::pair{1.0f, 0.0f}, {0.125f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}}) {
            const Operands o = operands(s, pad, beta, seed++);
            EXPECT_TRUE(same_bits(run(s, alpha, beta, o), promised(s, alpha, beta, o)))
                << kdp::detail::cpu_isa_name(kdp::detail::cpu_isa()) << " " << (s.ta ? 'T' : 'N')
                << (s.tb ? 'T' : 'N') << " " << s.m << "x" << s.n << "x" << s.k << " alpha "
                << alpha << " beta " << beta << " row lengths " << o.lda << ", " << o.ldb;
          }
        }
      }
    });
  }
}

TEST(RowGemm, IsCloseToTheExactProduct) {
  // The promise above could hold of a wrong kernel and a wrong reference
  // alike: the sums are also within float rounding of double products.
  const Case s{false, true, 13, 33, 600};
  const Operands o = operands(s, 0, 0.0f, 7);
  const std::vector<float> got = run(s, 1.0f, 0.0f, o);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < s.k; ++p) {
        sum += static_cast<double>(o.a[static_cast<size_t>(i * o.lda + p)]) *
               o.b[static_cast<size_t>(j * o.ldb + p)];
      }
      EXPECT_NEAR(got[static_cast<size_t>(i * o.ldc + j)], sum, 1e-6 * static_cast<double>(s.k));
    }
  }
}

TEST(RowGemm, ARowHasTheSameBitsInAnyBatch) {
  // Rows 5..11 of a 37-row product, and row 30 alone, computed as batches of
  // their own: the same bits as inside the larger one.
  for (const bool tb : {false, true}) {
    const Case s{false, tb, 37, 40, 300};
    const Operands o = operands(s, 0, 0.0f, 11);
    const std::vector<float> whole = run(s, 1.0f, 0.0f, o);
    for (const auto& [first, rows] : {std::pair<int64_t, int64_t>{5, 7}, {30, 1}}) {
      std::vector<float> part(static_cast<size_t>(rows * o.ldc));
      row_gemm(false, tb, rows, s.n, s.k, 1.0f, o.a.data() + first * o.lda, o.lda, o.b.data(),
               o.ldb, 0.0f, part.data(), o.ldc);
      EXPECT_EQ(std::memcmp(part.data(), whole.data() + first * o.ldc, part.size() * sizeof(float)),
                0)
          << "rows from " << first << ", " << rows << " of them, B " << (tb ? "T" : "N");
    }
  }
}

TEST(RowGemmBf16, IsThePairedChainOfEveryElementOnEveryPath) {
  // The uncapped path is vdpbf16ps where the CPU has AVX512_BF16; AVX-512
  // and AVX2 take row_gemm's fp32 chains on the rounded operands, baseline
  // the portable loop.
  for (CpuIsa cap : {CpuIsa::Amx, CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Baseline}) {
    with_isa(cap, [&] {
      unsigned seed = 1;
      for (const Case& s : cases(kBf16Shapes)) {
        for (const auto& [alpha, beta] :
             {std::pair{1.0f, 0.0f}, {0.125f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}}) {
          const Operands o = operands(s, 3, beta, seed++, 0, true);
          EXPECT_TRUE(same_bits(run_bf16(s, alpha, beta, o), promised_bf16(s, alpha, beta, o)))
              << kdp::detail::cpu_isa_name(kdp::detail::cpu_isa()) << " " << (s.ta ? 'T' : 'N')
              << (s.tb ? 'T' : 'N') << " " << s.m << "x" << s.n << "x" << s.k << " alpha " << alpha
              << " beta " << beta;
        }
      }
    });
  }
}

TEST(RowGemmBf16, FlushesSubnormalSumsAsPromised) {
  // Operands near 2^-64: their products and sums fall below FLT_MIN, where
  // the flush decides the bits (the fp32 chains see it and leave these sums
  // to the portable loop).
  for (CpuIsa cap : {CpuIsa::Amx, CpuIsa::Avx2, CpuIsa::Baseline}) {
    with_isa(cap, [&] {
      // C as the sums themselves (alpha 1, beta 0: the chains write C in
      // place, padded rows or not) and scaled (the sums apart first).
      for (const auto& [alpha, beta, pad] : {std::tuple{1.0f, 0.0f, int64_t{0}},
                                             {1.0f, 0.0f, int64_t{3}},
                                             {0.5f, 0.0f, int64_t{3}}}) {
        for (int t = 0; t < 4; ++t) {
          const Case s{(t & 1) != 0, (t & 2) != 0, 14, 40, 65};
          const Operands o = operands(s, pad, beta, 100 + static_cast<unsigned>(t), -64, true);
          const std::vector<float> got = run_bf16(s, alpha, beta, o);
          EXPECT_TRUE(same_bits(got, promised_bf16(s, alpha, beta, o)))
              << kdp::detail::cpu_isa_name(kdp::detail::cpu_isa()) << " alpha " << alpha << " beta "
              << beta << " pad " << pad;
          const std::vector<float> sums = run_bf16(
              s, 1.0f, 0.0f, operands(s, pad, 0.0f, 100 + static_cast<unsigned>(t), -64, true));
          size_t zeros = 0;
          for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < s.n; ++j)
              zeros += sums[static_cast<size_t>(i * o.ldc + j)] == 0.0f ? 1 : 0;
          }
          EXPECT_GT(zeros, 0u) << "no sum was flushed: the case tests nothing";
        }
      }
    });
  }
}

TEST(RowGemmBf16, IsCloseToTheProductOfTheRoundedOperands) {
  // The promise could hold of a wrong kernel and a wrong reference alike:
  // the sums are also within float rounding of the double product of the
  // rounded operands.
  const Case s{false, true, 13, 33, 600};
  const Operands o = operands(s, 0, 0.0f, 7, 0, true);
  const std::vector<float> got = run_bf16(s, 1.0f, 0.0f, o);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < s.k; ++p) {
        sum += static_cast<double>(round_to_bf16(o.a[static_cast<size_t>(i * o.lda + p)])) *
               round_to_bf16(o.b[static_cast<size_t>(j * o.ldb + p)]);
      }
      EXPECT_NEAR(got[static_cast<size_t>(i * o.ldc + j)], sum, 1e-6 * static_cast<double>(s.k));
    }
  }
}

TEST(RowGemmBf16, ARowHasTheSameBitsInAnyBatch) {
  // Rows 5..11 of a 37-row product, and row 30 alone, as batches of their
  // own; and the weight gradient's shape (op(A) stored transposed), whose
  // rows are columns of the stored matrix.
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Case s{ta, tb, 37, 40, 301};
      const Operands o = operands(s, 0, 0.0f, 11, 0, true);
      const std::vector<float> whole = run_bf16(s, 1.0f, 0.0f, o);
      for (const auto& [first, rows] : {std::pair<int64_t, int64_t>{5, 7}, {30, 1}}) {
        std::vector<float> part(static_cast<size_t>(rows * o.ldc));
        row_gemm_bf16(ta, tb, rows, s.n, s.k, 1.0f, o.a.data() + (ta ? first : first * o.lda),
                      o.lda, o.b.data(), o.ldb, 0.0f, part.data(), o.ldc);
        EXPECT_EQ(
            std::memcmp(part.data(), whole.data() + first * o.ldc, part.size() * sizeof(float)), 0)
            << "rows from " << first << ", " << rows << " of them, " << (ta ? 'T' : 'N')
            << (tb ? 'T' : 'N');
      }
    }
  }
}
