#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

TEST(Activation, ForwardValues) {
  Tensor x = Tensor::from_host({-2, -0.5, 0.5, 2}, {4});
  EXPECT_EQ(relu(x).to_vector(), (std::vector<float>{0, 0, 0.5, 2}));
  test::expect_close(leaky_relu(x, 0.1f).to_vector(), {-0.2f, -0.05f, 0.5f, 2.0f}, 1e-7, 0);
  const auto s = sigmoid(x).to_vector();
  const auto t = tanh(x).to_vector();
  const auto g = gelu(x).to_vector();
  const std::vector<float> xv = x.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(s[i], 1.0 / (1.0 + std::exp(-xv[i])), 1e-6);
    EXPECT_NEAR(t[i], std::tanh(xv[i]), 1e-6);
    EXPECT_NEAR(g[i], 0.5 * xv[i] * (1.0 + std::erf(xv[i] / std::sqrt(2.0))), 1e-6);
  }
}

TEST(Activation, GradientsMatchFiniteDifferences) {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> fn;
    std::vector<float> kinks;
  };
  const std::vector<Case> cases = {
      {"relu", [](const Tensor& x) { return relu(x); }, {0.0f}},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2f); }, {0.0f}},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, {}},
      {"tanh", [](const Tensor& x) { return tanh(x); }, {}},
      {"gelu", [](const Tensor& x) { return gelu(x); }, {}},
  };
  uint64_t seed = 1;
  for (const auto& c : cases) {
    for (const Shape& shape : {Shape{6}, Shape{1, 4}, Shape{3, 5}}) {
      Tensor x = leaf(test::random_away_from(shape, seed++, c.kinks, 0.02f, -2.0f, 2.0f));
      check_gradients([&](const std::vector<Tensor>& in) { return c.fn(in[0]); }, {x}, {},
                      std::string(c.name) + " " + shape.str());
    }
  }
}

TEST(Activation, SoftmaxRowsSumToOneEvenForLargeLogits) {
  Tensor x = Tensor::from_host({1000, 1001, 1002, -1000, 0, 1000}, {2, 3});
  const auto p = softmax(x, 1).to_vector();
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0, 1e-6);
  EXPECT_NEAR(p[3] + p[4] + p[5], 1.0, 1e-6);
  EXPECT_NEAR(p[2], 1.0 / (1.0 + std::exp(-1.0) + std::exp(-2.0)), 1e-6);
  const auto lp = log_softmax(x, 1).to_vector();
  for (float v : lp) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(lp[3], -2000.0, 1e-2);
}

TEST(Activation, SoftmaxGradientsAlongEveryDimension) {
  Tensor x = leaf(random_tensor({3, 4, 2}, 7, -2.0f, 2.0f));
  for (int dim = 0; dim < 3; ++dim) {
    check_gradients([&](const std::vector<Tensor>& in) { return softmax(in[0], dim); }, {x}, {},
                    "softmax dim " + std::to_string(dim));
    check_gradients([&](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); }, {x}, {},
                    "log_softmax dim " + std::to_string(dim));
  }
}

TEST(Activation, DropoutScalesKeptElementsAndReplaysItsMaskInBackward) {
  Tensor x = leaf(Tensor::ones({4000}));
  const float p = 0.25f;
  Tensor y = dropout(x, p, true);
  const auto yv = y.to_vector();
  int kept = 0;
  for (float v : yv) {
    ASSERT_TRUE(v == 0.0f || std::fabs(v - 1.0f / (1.0f - p)) < 1e-6) << v;
    kept += v != 0.0f;
  }
  // Binomial(4000, 0.75): standard deviation 27; 5 sigma is 137.
  EXPECT_NEAR(kept, 3000, 137);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), yv);  // d(sum)/dx is the mask times the scale
  EXPECT_TRUE(dropout(x, p, false).is_same(x));
  EXPECT_THROW(dropout(x, 1.5f, true), ValueError);
  const auto zeros = dropout(x, 1.0f, true).to_vector();
  for (float v : zeros) EXPECT_EQ(v, 0.0f);
}
