#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

TEST(ShapeOps, GradientsOfReshapeSliceChunkCatClone) {
  Tensor x = leaf(random_tensor({4, 3, 2}, 1));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return in[0].reshape({6, -1}) * 2.0f;
      },
      {x}, {}, "reshape");
  for (int dim = 0; dim < 3; ++dim) {
    check_gradients(
        [&](const std::vector<Tensor>& in) { return in[0].slice(dim, 1, in[0].size(dim)); }, {x},
        {}, "slice dim " + std::to_string(dim));
    check_gradients(
        [&](const std::vector<Tensor>& in) {
          auto pieces = in[0].chunk(2, dim);
          // Scale the pieces differently so a mix-up shows in the gradient.
          for (size_t k = 0; k < pieces.size(); ++k) pieces[k] = pieces[k] * float(k + 1);
          return cat(pieces, dim);
        },
        {x}, {}, "chunk/cat dim " + std::to_string(dim));
  }
  check_gradients([](const std::vector<Tensor>& in) { return in[0].clone(); }, {x}, {}, "clone");
}

TEST(ShapeOps, ChunkWithUnusedPiecesGivesZeroGradientThere) {
  Tensor x = leaf(Tensor::ones({5, 2}));
  auto pieces = x.chunk(3);
  sum(pieces[1]).backward();  // only rows 2..3 are used
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 0, 0}));
}

TEST(ShapeOps, CatOfDifferentSizesAndGradients) {
  Tensor a = leaf(random_tensor({2, 3}, 2));
  Tensor b = leaf(random_tensor({1, 3}, 3));
  Tensor c = leaf(random_tensor({2, 2}, 4));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return cat({in[0], in[1]}, 0);
      },
      {a, b}, {}, "cat dim 0");
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return cat({in[0], in[1]}, 1);
      },
      {a, c}, {}, "cat dim 1");
}

TEST(ShapeOps, ToAnotherDeviceIsDifferentiable) {
  auto devs = Runtime::get().devices(2);
  Tensor x = leaf(random_tensor({3, 2}, 5, -1.0f, 1.0f, devs[0]));
  Tensor y = x.to(devs[1]);
  EXPECT_EQ(y.device(), devs[1]);
  EXPECT_EQ(y.to_vector(), x.to_vector());
  sum(y * 3.0f).backward();
  EXPECT_EQ(x.grad().device(), devs[0]);
  EXPECT_EQ(x.grad().to_vector(), std::vector<float>(6, 3.0f));
}
