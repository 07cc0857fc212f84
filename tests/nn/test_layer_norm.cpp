#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::random_tensor;

// PyTorch's parameters (names, shapes, ones and zeros) and printout; the
// forward is the function's with them, and a clone keeps trained values.
TEST(LayerNormModule, ParametersAndForwardAsPyTorchHasThem) {
  nn::LayerNorm norm({2, 4});
  const auto params = norm.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(params[0].second.shape(), (Shape{2, 4}));
  EXPECT_EQ(params[0].second.to_vector(), std::vector<float>(8, 1.0f));
  EXPECT_EQ(params[1].second.to_vector(), std::vector<float>(8, 0.0f));
  EXPECT_EQ(norm.to_string(), "LayerNorm((2, 4), eps=1e-05, elementwise_affine=true)");
  EXPECT_EQ(nn::LayerNorm({64}).extra_repr(), "(64,), eps=1e-05, elementwise_affine=true");

  const Tensor w = random_tensor({2, 4}, 41), b = random_tensor({2, 4}, 42);
  {
    NoGradGuard no_grad;
    Tensor weight = norm.weight(), bias = norm.bias();
    weight.copy_(w);
    bias.copy_(b);
  }
  const Tensor x = random_tensor({3, 2, 4}, 43);
  EXPECT_EQ(norm.forward(x).to_vector(), layer_norm(x, {2, 4}, w, b).to_vector());
  EXPECT_EQ(norm.clone()->forward(x).to_vector(), norm.forward(x).to_vector());

  EXPECT_TRUE(nn::LayerNorm({4}, 1e-5, false).named_parameters().empty());
  EXPECT_EQ(nn::LayerNorm({4}, 1e-5, true, false).named_parameters().size(), 1u);
  EXPECT_EQ(nn::LayerNorm({4}, 0.5, false).forward(x.reshape({6, 4})).to_vector(),
            layer_norm(x.reshape({6, 4}), {4}, Tensor(), Tensor(), 0.5).to_vector());
  EXPECT_THROW(nn::LayerNorm({}), ShapeError);
  EXPECT_THROW(nn::LayerNorm({4, 0}), ShapeError);
  EXPECT_THROW(nn::LayerNorm({4}, 0.0), ValueError);
}
