#include "kernels/native/small_gemm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using kdp::detail::small_gemm;

namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
};

// C = alpha op(A) op(B) + beta C in double precision, with the same storage.
std::vector<double> reference(const Case& s, float alpha, const std::vector<float>& a, int64_t lda,
                              const std::vector<float>& b, int64_t ldb, float beta,
                              const std::vector<float>& c, int64_t ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double x =
            s.ta ? a[static_cast<size_t>(p * lda + i)] : a[static_cast<size_t>(i * lda + p)];
        const double y =
            s.tb ? b[static_cast<size_t>(j * ldb + p)] : b[static_cast<size_t>(p * ldb + j)];
        sum += x * y;
      }
      const auto at = static_cast<size_t>(i * ldc + j);
      out[at] = alpha * sum + (beta == 0.0f ? 0.0 : beta * static_cast<double>(c[at]));
    }
  }
  return out;
}

void check(const Case& s, float alpha, float beta, int64_t pad, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
  const int64_t b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = s.n + pad;
  std::vector<float> a(static_cast<size_t>(a_rows * lda)), b(static_cast<size_t>(b_rows * ldb)),
      c(static_cast<size_t>(s.m * ldc));
  for (float& x : a) x = u(gen);
  for (float& x : b) x = u(gen);
  for (float& x : c) x = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : u(gen);
  const std::vector<double> want = reference(s, alpha, a, lda, b, ldb, beta, c, ldc);
  std::vector<float> got = c;
  ASSERT_TRUE(small_gemm(s.ta, s.tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta,
                         got.data(), ldc));
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const auto at = static_cast<size_t>(i * ldc + j);
      if (j >= s.n) {  // padding past the row: never written
        EXPECT_TRUE(std::isnan(got[at]) ? std::isnan(c[at]) : got[at] == c[at]);
        continue;
      }
      // Sums of k products of values in [-1, 1], rounded in float.
      EXPECT_NEAR(got[at], want[at], 1e-6 * static_cast<double>(s.k) + 1e-6)
          << (s.ta ? 'T' : 'N') << (s.tb ? 'T' : 'N') << " " << s.m << "x" << s.n << "x" << s.k
          << " alpha " << alpha << " beta " << beta << " at (" << i << ", " << j << ")";
    }
  }
}

}  // namespace

TEST(SmallGemm, EqualsTheProductForEveryTranspositionAndEdge) {
  if (!kdp::detail::small_gemm_available())
    GTEST_SKIP() << "small_gemm does not run here (no AVX2 and FMA, or kdp's x86 kernels left out)";
  // The explainer's model's five products, then every row and column remainder
  // of the 4 x 16 tiles (and a single column, row or inner step).
  std::vector<Case> cases = {{false, true, 64, 100, 10},
                             {false, true, 64, 10, 100},
                             {false, false, 64, 100, 10},
                             {true, false, 10, 100, 64},
                             {true, false, 100, 10, 64}};
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int64_t m : {1, 2, 3, 4, 5, 7}) {
        for (int64_t n : {1, 7, 8, 9, 16, 17, 33}) cases.push_back({ta, tb, m, n, 3});
      }
      cases.push_back({ta, tb, 9, 20, 1});
    }
  }
  unsigned seed = 1;
  for (const Case& s : cases) {
    check(s, 1.0f, 0.0f, 0, seed++);  // beta 0: C's old values (NaN here) are not read
    check(s, 1.0f, 1.0f, 0, seed++);
    check(s, -0.5f, 0.25f, 3, seed++);  // other scalars, rows longer than the matrices
  }
}

TEST(SmallGemm, LeavesLargerProductsToTheBlas) {
  const int64_t n = 128;  // 128^3 > kSmallGemmMaxWork
  static_assert(128 * 128 * 128 > kdp::detail::kSmallGemmMaxWork);
  std::vector<float> a(static_cast<size_t>(n * n), 1.0f), c(static_cast<size_t>(n * n), 7.0f);
  EXPECT_FALSE(
      small_gemm(false, false, n, n, n, 1.0f, a.data(), n, a.data(), n, 0.0f, c.data(), n));
  for (float v : c) ASSERT_EQ(v, 7.0f);
  EXPECT_FALSE(
      small_gemm(false, false, 0, 4, 4, 1.0f, a.data(), 4, a.data(), 4, 0.0f, c.data(), 4));
  // A small product whose transposed B is too large to copy into rows.
  static_assert(100 * 100 > kdp::detail::kSmallGemmMaxPacked);
  EXPECT_FALSE(small_gemm(false, true, 2, 100, 100, 1.0f, a.data(), 100, a.data(), 100, 0.0f,
                          c.data(), 100));
  for (float v : c) ASSERT_EQ(v, 7.0f);
}

TEST(SmallGemm, WhereItCannotRunItDeclinesAndTouchesNothing) {
  // On CPUs without the kernel (and in builds without it) ops must fall back
  // to the BLAS: the kernel is neither preferred nor run, and C is untouched.
  if (!kdp::detail::small_gemm_preferred() && !kdp::detail::small_gemm_available()) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, 7.0f);
    EXPECT_FALSE(
        small_gemm(false, false, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2));
    EXPECT_EQ(c, std::vector<float>(4, 7.0f));
  }
  // Preferred only where it can run.
  EXPECT_TRUE(!kdp::detail::small_gemm_preferred() || kdp::detail::small_gemm_available());
}
