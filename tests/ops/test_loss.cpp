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
    if constexpr (!compat::host_accessible_memory()) {
      // A GPU's targets are not read on the host: the loss kernels give NaN,
      // which the Trainer's anomaly check reports.
      EXPECT_TRUE(std::isnan(cross_entropy(x, t).item())) << bad;
      EXPECT_TRUE(std::isnan(nll_loss(x, t).item())) << bad;
      continue;
    }
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

// L1, smooth L1 and Huber by PyTorch's definitions (d = input - target):
// values against the formulas written out here, gradients against central
// differences on differences away from the kinks (0 and +-beta), and the
// kinks' own slopes (PyTorch's: 0 at d = 0 for L1, the sign at |d| = beta).
TEST(Loss, RegressionLossesMatchPyTorchsDefinitions) {
  const std::vector<float> d = {-2.3f, -0.7f, -0.31f, 0.45f,  0.8f, 1.9f,
                                -1.2f, 0.2f,  0.61f,  -0.15f, 3.0f, -0.9f};
  Tensor a = leaf(random_tensor({3, 4}, 23));
  std::vector<float> bv = a.to_vector();
  for (size_t i = 0; i < bv.size(); ++i) bv[i] -= d[i];
  Tensor b = leaf(Tensor::from_host(bv, {3, 4}));
  const auto av = a.to_vector();
  const double beta = 0.5, delta = 1.0;
  double l1 = 0.0, smooth = 0.0, huber = 0.0;
  for (size_t i = 0; i < av.size(); ++i) {
    const double x = static_cast<double>(av[i]) - static_cast<double>(bv[i]);
    const double m = std::fabs(x);
    l1 += m;
    smooth += m < beta ? 0.5 * x * x / beta : m - 0.5 * beta;
    huber += m < delta ? 0.5 * x * x : delta * (m - 0.5 * delta);
  }
  EXPECT_NEAR(l1_loss(a, b).item(), l1 / 12.0, 1e-6);
  EXPECT_NEAR(l1_loss(a, b, Reduction::Sum).item(), l1, 1e-5);
  EXPECT_NEAR(smooth_l1_loss(a, b, Reduction::Mean, beta).item(), smooth / 12.0, 1e-6);
  EXPECT_NEAR(huber_loss(a, b, Reduction::Sum, delta).item(), huber, 1e-5);
  EXPECT_NEAR(smooth_l1_loss(a, b, Reduction::Sum, 0.0).item(), l1, 1e-5) << "beta 0 is L1";
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    check_gradients([&](const std::vector<Tensor>& in) { return l1_loss(in[0], in[1], r); }, {a, b},
                    {}, "l1_loss");
    check_gradients(
        [&](const std::vector<Tensor>& in) { return smooth_l1_loss(in[0], in[1], r, beta); },
        {a, b}, {}, "smooth_l1_loss");
    check_gradients(
        [&](const std::vector<Tensor>& in) { return huber_loss(in[0], in[1], r, delta); }, {a, b},
        {}, "huber_loss");
  }
  // The kinks.
  Tensor x = leaf(Tensor::from_host({0.0f, 0.5f, -0.5f, 1.0f}, {4}));
  Tensor zero = Tensor::zeros({4});
  l1_loss(x, zero, Reduction::Sum).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0.0f, 1.0f, -1.0f, 1.0f}));
  x.set_grad(Tensor());
  smooth_l1_loss(x, zero, Reduction::Sum, 0.5).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0.0f, 1.0f, -1.0f, 1.0f}));
  x.set_grad(Tensor());
  huber_loss(x, zero, Reduction::Sum, 0.5).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0.0f, 0.5f, -0.5f, 0.5f}));
  try {
    huber_loss(a, b, Reduction::Mean, -1.0);
    FAIL() << "a negative delta was taken";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("kdp::huber_loss"), std::string::npos) << e.what();
  }
}

namespace {

// PyTorch's weighted, ignoring, smoothed cross entropy, by its definition in
// double: rows r with q = (1 - s) onehot(t_r) + s / C, loss_r = -sum_c q_c
// w_c log p_rc ... as PyTorch composes it: (1 - s) w_t (-log p_t) + s / C
// sum_c w_c (-log p_c), ignored rows 0; the mean divides by the sum of w_t
// over the rows that count.
std::vector<double> reference_rows(const std::vector<float>& x, const std::vector<float>& t,
                                   const std::vector<float>& w, int64_t classes, int64_t ignore,
                                   double s, double& divisor) {
  const int64_t rows = static_cast<int64_t>(t.size());
  std::vector<double> out;
  divisor = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[static_cast<size_t>(r)] == static_cast<float>(ignore)) {
      out.push_back(0.0);
      continue;
    }
    double m = -INFINITY, z = 0;
    for (int64_t c = 0; c < classes; ++c)
      m = std::max<double>(m, x[static_cast<size_t>(r * classes + c)]);
    for (int64_t c = 0; c < classes; ++c)
      z += std::exp(x[static_cast<size_t>(r * classes + c)] - m);
    auto neg_log_p = [&](int64_t c) {
      return m + std::log(z) - x[static_cast<size_t>(r * classes + c)];
    };
    const auto tc = static_cast<int64_t>(t[static_cast<size_t>(r)]);
    const double wt = w.empty() ? 1.0 : w[static_cast<size_t>(tc)];
    double smooth = 0;
    for (int64_t c = 0; c < classes; ++c)
      smooth += (w.empty() ? 1.0 : w[static_cast<size_t>(c)]) * neg_log_p(c);
    out.push_back((1 - s) * wt * neg_log_p(tc) + s / static_cast<double>(classes) * smooth);
    divisor += wt;
  }
  return out;
}

}  // namespace

TEST(Loss, CrossEntropyWithWeightsIgnoredRowsAndLabelSmoothing) {
  const int64_t rows = 6, classes = 4;
  const Tensor x = random_tensor({rows, classes}, 31, -2.0f, 2.0f);
  const Tensor t = Tensor::from_host({0, 3, 1, 7, 2, 3}, {rows});  // 7: the ignored index
  const Tensor w = Tensor::from_host({0.5f, 2.0f, 1.0f, 0.25f}, {classes});
  for (bool weighted : {false, true}) {
    for (double s : {0.0, 0.1, 1.0}) {
      ClassLossOptions o;
      if (weighted) o.weight = w;
      o.ignore_index = 7;
      o.label_smoothing = s;
      double divisor = 0;
      const std::vector<double> ref =
          reference_rows(x.to_vector(), t.to_vector(),
                         weighted ? w.to_vector() : std::vector<float>{}, classes, 7, s, divisor);
      double total = 0;
      for (double v : ref) total += v;
      o.reduction = Reduction::None;
      const std::vector<float> none = cross_entropy(x, t, o).to_vector();
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_NEAR(none[static_cast<size_t>(r)], ref[static_cast<size_t>(r)], 1e-5);
      o.reduction = Reduction::Sum;
      EXPECT_NEAR(cross_entropy(x, t, o).item(), total, 1e-4);
      o.reduction = Reduction::Mean;
      EXPECT_NEAR(cross_entropy(x, t, o).item(), total / divisor, 1e-5);
      // Gradients through the composed path.
      check_gradients([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, o); },
                      {leaf(x.clone())}, {}, "weighted/smoothed cross entropy");
    }
  }
  // An all-ignored batch: the mean is NaN, as PyTorch's.
  ClassLossOptions all;
  all.ignore_index = 1;
  EXPECT_TRUE(std::isnan(cross_entropy(x.slice(0, 2, 3), t.slice(0, 2, 3), all).item()));
  // The ignored index may lie outside [0, C); other such targets are refused
  // (a NaN loss on a GPU, as above).
  if constexpr (compat::host_accessible_memory()) {
    EXPECT_THROW(cross_entropy(x, t, ClassLossOptions{}), ValueError);
  } else {
    EXPECT_TRUE(std::isnan(cross_entropy(x, t, ClassLossOptions{}).item()));
  }
  ClassLossOptions bad_weight;
  bad_weight.weight = Tensor::ones({3});
  EXPECT_THROW(cross_entropy(x, Tensor::zeros({rows}), bad_weight), ShapeError);
  // Without options the fused kernels and the composed path agree.
  ClassLossOptions plain_but_general;
  plain_but_general.ignore_index = 9;
  plain_but_general.weight = Tensor::ones({classes});
  EXPECT_NEAR(cross_entropy(x, Tensor::zeros({rows}), plain_but_general).item(),
              cross_entropy(x, Tensor::zeros({rows})).item(), 1e-6);
}

TEST(Loss, WeightedNllLossAndItsModules) {
  const Tensor lp = log_softmax(random_tensor({5, 3}, 8), 1);
  const Tensor t = Tensor::from_host({0, 2, 1, 2, 0}, {5});
  ClassLossOptions o;
  o.weight = Tensor::from_host({1.0f, 3.0f, 0.5f}, {3});
  const std::vector<float> v = lp.to_vector();
  const double num = -(1.0 * v[0] + 0.5 * v[5] + 3.0 * v[7] + 0.5 * v[11] + 1.0 * v[12]);
  EXPECT_NEAR(nll_loss(lp, t, o).item(), num / (1 + 0.5 + 3 + 0.5 + 1), 1e-6);
  EXPECT_NEAR(nn::NLLLoss(o).forward(lp, t).item(), num / 6.0, 1e-6);
  ClassLossOptions smooth;
  smooth.label_smoothing = 0.2;
  EXPECT_THROW(nll_loss(lp, t, smooth), ValueError);
  nn::CrossEntropyLoss ce(smooth);
  EXPECT_GT(ce.forward(random_tensor({5, 3}, 9), t).item(), 0.0f);
}

// PyTorch's [N, C, d1, ...] logits against [N, d1, ...] targets: the same
// losses as the rows [N d1 ..., C] (each position's classes), with the
// per-element losses in the targets' shape and ignore_index alike.
TEST(Loss, CrossEntropyOverSequencesIsTheLossOfEachPosition) {
  Tensor logits = test::leaf(test::random_tensor({2, 5, 3}, 31));  // [N, C, T]
  const Tensor target = Tensor::from_host({0, 4, 2, 1, 1, 3}, {2, 3});
  auto rows = [](const Tensor& x) { return permute(x, {0, 2, 1}).reshape({6, 5}); };
  const Tensor flat = target.reshape({6});
  EXPECT_EQ(cross_entropy(logits, target).item(), cross_entropy(rows(logits), flat).item());
  const Tensor each = cross_entropy(logits, target, Reduction::None);
  EXPECT_EQ(each.shape(), (Shape{2, 3}));
  EXPECT_EQ(each.to_vector(), cross_entropy(rows(logits), flat, Reduction::None).to_vector());
  const ClassLossOptions skip = ClassLossOptions{}.with_ignore_index(1);
  EXPECT_EQ(cross_entropy(logits, target, skip).item(),
            cross_entropy(rows(logits), flat, skip).item());
  test::check_gradients(
      [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, skip); }, {logits},
      {}, "cross_entropy over [N, C, T]");
  try {
    cross_entropy(logits, Tensor::zeros({2, 5}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("the targets must be [2, 3]"), std::string::npos)
        << e.what();
  }
}
