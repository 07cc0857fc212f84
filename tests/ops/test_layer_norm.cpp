#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

// layer_norm over the last n elements of each row, in double.
std::vector<float> naive_layer_norm(const std::vector<float>& x, const std::vector<float>& w,
                                    const std::vector<float>& b, int64_t n, double eps) {
  std::vector<float> y(x.size());
  for (size_t base = 0; base < x.size(); base += size_t(n)) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; ++i) mean += x[base + size_t(i)];
    mean /= double(n);
    for (int64_t i = 0; i < n; ++i) var += std::pow(x[base + size_t(i)] - mean, 2);
    var /= double(n);
    for (int64_t i = 0; i < n; ++i) {
      double v = (x[base + size_t(i)] - mean) / std::sqrt(var + eps);
      if (!w.empty()) v *= w[size_t(i)];
      if (!b.empty()) v += b[size_t(i)];
      y[base + size_t(i)] = float(v);
    }
  }
  return y;
}

}  // namespace

TEST(LayerNorm, ForwardIsTheFormulaOverTheTrailingDimensions) {
  // A row with a large common offset: the statistics must not lose it.
  Tensor x = random_tensor({3, 2, 4}, 31, 99.0f, 101.0f);
  Tensor w = random_tensor({2, 4}, 32, 0.5f, 1.5f);
  Tensor b = random_tensor({2, 4}, 33);
  test::expect_close(layer_norm(x, {2, 4}, w, b).to_vector(),
                     naive_layer_norm(x.to_vector(), w.to_vector(), b.to_vector(), 8, 1e-5), 2e-4,
                     0);
  test::expect_close(layer_norm(x, {4}).to_vector(),
                     naive_layer_norm(x.to_vector(), {}, {}, 4, 1e-5), 2e-4, 0);
  test::expect_close(layer_norm(x, {4}, Tensor(), Tensor(), 0.5).to_vector(),
                     naive_layer_norm(x.to_vector(), {}, {}, 4, 0.5), 1e-5, 0);
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  Tensor x = leaf(random_tensor({3, 2, 4}, 34));
  Tensor w = leaf(random_tensor({2, 4}, 35, 0.5f, 1.5f));
  Tensor b = leaf(random_tensor({2, 4}, 36));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return layer_norm(in[0], {2, 4}, in[1], in[2]);
      },
      {x, w, b}, {}, "layer_norm over [2, 4] with weight and bias");
  Tensor wide = leaf(random_tensor({5, 6}, 37));
  check_gradients([](const std::vector<Tensor>& in) { return layer_norm(in[0], {6}); }, {wide}, {},
                  "layer_norm over [6] without weight and bias");
  Tensor w6 = leaf(random_tensor({6}, 38));
  check_gradients([](const std::vector<Tensor>& in) { return layer_norm(in[0], {6}, in[1]); },
                  {wide, w6}, {}, "layer_norm with a weight only");
}

// Without weight and bias each row's outputs sum to zero whatever the input,
// so the gradient of their sum is zero: the closed form's two correction
// terms must cancel the plain one exactly.
TEST(LayerNorm, TheGradientOfARowsSumIsZero) {
  Tensor x = leaf(random_tensor({4, 16}, 39, -3.0f, 3.0f));
  sum(layer_norm(x, {16})).backward();
  for (float g : x.grad().to_vector()) EXPECT_NEAR(g, 0.0f, 1e-5);
}

TEST(LayerNorm, BadArgumentsAreNamed) {
  Tensor x = Tensor::zeros({2, 3, 4});
  try {
    layer_norm(x, {3});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kdp::layer_norm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  }
  EXPECT_THROW(layer_norm(x, {}), ShapeError);
  EXPECT_THROW(layer_norm(x, {1, 2, 3, 4}), ShapeError);
  EXPECT_THROW(layer_norm(x, {4}, Tensor::ones({3})), ShapeError);
  EXPECT_THROW(layer_norm(x, {4}, Tensor(), Tensor::ones({4, 1})), ShapeError);
  EXPECT_THROW(layer_norm(x, {4}, Tensor(), Tensor(), 0.0), ValueError);
}
