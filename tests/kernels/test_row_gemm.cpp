// row_gemm: every element is the fused multiply-adds of its row and column in
// the order of the inner index (so a row's bits do not depend on the rows
// around it), on the AVX-512, AVX2 and portable paths alike.
#include "kernels/native/row_gemm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_isa.hpp"

using kdp::detail::CpuIsa;
using kdp::detail::row_gemm;

namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
};

struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;
};

Operands operands(const Case& s, int64_t pad, float beta, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
  const int64_t b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
  Operands o{a_cols + pad, b_cols + pad, s.n + pad, {}, {}, {}};
  o.a.resize(static_cast<size_t>(a_rows * o.lda));
  o.b.resize(static_cast<size_t>(b_rows * o.ldb));
  o.c.resize(static_cast<size_t>(s.m * o.ldc));
  for (float& x : o.a) x = u(gen);
  for (float& x : o.b) x = u(gen);
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

// Shapes across every edge of the kernels' tiles (6 rows with AVX2, 12 with
// AVX-512; 16 and 32 columns) and blocks (256 inner
// steps, 512 columns), for each transposition.
std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t shapes[][3] = {{1, 1, 1},     {5, 17, 3},    {6, 16, 256},  {7, 15, 257},
                               {13, 33, 600}, {12, 530, 40}, {20, 10, 784}, {35, 47, 19}};
  for (int t = 0; t < 4; ++t) {
    for (const auto& sh : shapes) out.push_back({(t & 1) != 0, (t & 2) != 0, sh[0], sh[1], sh[2]});
  }
  return out;
}

// Runs f with cpu_isa() capped at `cap`, then restores the cap.
template <class F>
void with_isa(CpuIsa cap, const F& f) {
  const CpuIsa before = kdp::detail::set_cpu_isa_limit(cap);
  f();
  kdp::detail::set_cpu_isa_limit(before);
}

}  // namespace

TEST(RowGemm, IsTheFusedSumOfEveryElementOnEveryPath) {
  for (CpuIsa cap : {CpuIsa::Amx, CpuIsa::Avx2, CpuIsa::Baseline}) {
    with_isa(cap, [&] {
      unsigned seed = 1;
      for (const Case& s : cases()) {
        for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}}) {
          const Operands o = operands(s, 3, beta, seed++);
          EXPECT_TRUE(same_bits(run(s, alpha, beta, o), promised(s, alpha, beta, o)))
              << kdp::detail::cpu_isa_name(kdp::detail::cpu_isa()) << " " << (s.ta ? 'T' : 'N')
              << (s.tb ? 'T' : 'N') << " " << s.m << "x" << s.n << "x" << s.k << " alpha " << alpha
              << " beta " << beta;
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
