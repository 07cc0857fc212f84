#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

// Mean over rows of logsumexp(x_b) - x_b[t_b], in double with the max subtracted.
double reference_cross_entropy(const std::vector<float>& x, const std::vector<float>& t,
                               int64_t rows, int64_t classes) {
  double total = 0.0;
  for (int64_t b = 0; b < rows; ++b) {
    double m = -1e300;
    for (int64_t c = 0; c < classes; ++c)
      m = std::max(m, static_cast<double>(x[static_cast<size_t>(b * classes + c)]));
    double s = 0.0;
    for (int64_t c = 0; c < classes; ++c)
      s += std::exp(x[static_cast<size_t>(b * classes + c)] - m);
    total += m + std::log(s) -
             x[static_cast<size_t>(b * classes + static_cast<int64_t>(t[static_cast<size_t>(b)]))];
  }
  return total / static_cast<double>(rows);
}

}  // namespace

TEST(Loss, CrossEntropyMatchesLogSumExpForEveryClass) {
  const int64_t classes = 5;
  // Every class index appears at least twice; 75 rows span several of the
  // blocks host backends compute together, the last one partly filled.
  for (const int64_t rows : {10, 75}) {
    std::vector<float> t(static_cast<size_t>(rows));
    for (int64_t b = 0; b < rows; ++b) t[static_cast<size_t>(b)] = static_cast<float>(b % classes);
    for (float scale : {1.0f, 100.0f, 1000.0f}) {  // large logits must not overflow
      const auto xv = test::random_values(rows * classes, 3, -scale, scale);
      Tensor x = Tensor::from_host(xv, {rows, classes});
      Tensor target = Tensor::from_host(t, {rows});
      const double expected = reference_cross_entropy(xv, t, rows, classes);
      const float got = cross_entropy(x, target).item();
      ASSERT_TRUE(std::isfinite(got)) << "scale " << scale;
      EXPECT_NEAR(got, expected, 1e-5 * std::max(1.0, std::fabs(expected))) << "scale " << scale;
      EXPECT_NEAR(cross_entropy(x, target, Reduction::Sum).item(), expected * rows,
                  1e-5 * std::max(1.0, std::fabs(expected * rows)));
      const std::vector<float> per_row = cross_entropy(x, target, Reduction::None).to_vector();
      ASSERT_EQ(per_row.size(), static_cast<size_t>(rows));
      for (int64_t b = 0; b < rows; ++b) {
        const std::vector<float> row(xv.begin() + b * classes, xv.begin() + (b + 1) * classes);
        const double want = reference_cross_entropy(row, {t[static_cast<size_t>(b)]}, 1, classes);
        EXPECT_NEAR(per_row[static_cast<size_t>(b)], want, 1e-5 * std::max(1.0, std::fabs(want)))
            << "row " << b << " of " << rows << ", scale " << scale;
      }
    }
  }
}

TEST(Loss, ANaNLogitMakesItsRowsLossNaN) {
  // As in PyTorch: a NaN in the logits reaches the loss (the anomaly check
  // relies on it), in whichever block of rows it is; other rows are unchanged.
  const int64_t rows = 40, classes = 5;
  std::vector<float> xv = test::random_values(rows * classes, 7, -3.0f, 3.0f);
  xv[35 * classes + 2] = std::nanf("");
  std::vector<float> t(static_cast<size_t>(rows), 0.0f);
  const std::vector<float> per_row = cross_entropy(Tensor::from_host(xv, {rows, classes}),
                                                   Tensor::from_host(t, {rows}), Reduction::None)
                                         .to_vector();
  for (int64_t b = 0; b < rows; ++b) {
    EXPECT_EQ(std::isnan(per_row[static_cast<size_t>(b)]), b == 35) << "row " << b;
  }
  EXPECT_TRUE(std::isnan(
      cross_entropy(Tensor::from_host(xv, {rows, classes}), Tensor::from_host(t, {rows})).item()));
}

TEST(Loss, CrossEntropyGradientIsSoftmaxMinusOneHot) {
  Tensor x = leaf(random_tensor({4, 3}, 9, -2.0f, 2.0f));
  Tensor t = Tensor::from_host({0, 2, 1, 2}, {4});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    check_gradients([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, r); }, {x},
                    {}, "cross_entropy");
  }
  x.set_grad(Tensor());
  cross_entropy(x, t).backward();
  const auto p = softmax(x, 1).to_vector();
  auto g = x.grad().to_vector();
  const std::vector<float> tv = t.to_vector();
  for (int b = 0; b < 4; ++b) {
    for (int c = 0; c < 3; ++c) {
      const float expected =
          (p[static_cast<size_t>(b * 3 + c)] - (c == tv[static_cast<size_t>(b)] ? 1.0f : 0.0f)) /
          4.0f;
      EXPECT_NEAR(g[static_cast<size_t>(b * 3 + c)], expected, 1e-6);
    }
  }
}

TEST(Loss, NllAndLogSoftmaxEqualCrossEntropy) {
  Tensor x = leaf(random_tensor({6, 4}, 11, -3.0f, 3.0f));
  Tensor t = Tensor::from_host({3, 0, 1, 2, 3, 0}, {6});
  EXPECT_NEAR(nll_loss(log_softmax(x, 1), t).item(), cross_entropy(x, t).item(), 1e-6);
  check_gradients([&](const std::vector<Tensor>& in) { return nll_loss(in[0], t); }, {x}, {},
                  "nll_loss");
}

TEST(Loss, OutOfRangeClassIndexIsReported) {
  Tensor x = Tensor::zeros({4, 10});
  for (float bad : {10.0f, -1.0f, 2.5f}) {
    Tensor t = Tensor::from_host({1, 2, bad, 3}, {4});
    try {
      cross_entropy(x, t);
      FAIL() << "expected ValueError for " << bad;
    } catch (const ValueError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("kdp::cross_entropy"), std::string::npos) << msg;
      EXPECT_NE(msg.find("target[2]"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
    }
    EXPECT_THROW(nll_loss(x, t), ValueError);
  }
  EXPECT_THROW(cross_entropy(x, Tensor::zeros({3})), ShapeError);
  EXPECT_THROW(cross_entropy(Tensor::zeros({10}), Tensor::zeros({1})), ShapeError);
}

TEST(Loss, MseMatchesDefinitionAndGradients) {
  Tensor a = leaf(random_tensor({3, 4}, 21));
  Tensor b = leaf(random_tensor({3, 4}, 22));
  const auto av = a.to_vector(), bv = b.to_vector();
  double s = 0.0;
  for (size_t i = 0; i < av.size(); ++i) s += (av[i] - bv[i]) * (av[i] - bv[i]);
  EXPECT_NEAR(mse_loss(a, b).item(), s / 12.0, 1e-6);
  EXPECT_NEAR(mse_loss(a, b, Reduction::Sum).item(), s, 1e-5);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    check_gradients([&](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); },
                    {a, b}, {}, "mse_loss");
  }
  try {
    mse_loss(a, Tensor::zeros({4, 3}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 3]"), std::string::npos);
  }
}
