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

namespace {

// x's element at `index` (row-major), read from its host copy.
float at(const std::vector<float>& values, const Shape& shape, const std::vector<int64_t>& index) {
  int64_t offset = 0;
  for (int d = 0; d < shape.rank(); ++d) offset = offset * shape[d] + index[size_t(d)];
  return values[size_t(offset)];
}

// Every index of `shape`, in row-major order.
std::vector<std::vector<int64_t>> indices(const Shape& shape) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> i(size_t(shape.rank()), 0);
  for (int64_t n = 0; n < shape.numel(); ++n) {
    out.push_back(i);
    for (int d = shape.rank() - 1; d >= 0; --d) {
      if (++i[size_t(d)] < shape[d]) break;
      i[size_t(d)] = 0;
    }
  }
  return out;
}

}  // namespace

// out[i0, i1, ...] = x[i at the positions perm names], for every element.
TEST(ShapeOps, PermuteAndTransposeMoveEveryElement) {
  Tensor x = random_tensor({2, 3, 4, 5}, 11);
  const std::vector<float> xv = x.to_vector();
  for (const std::vector<int>& perm :
       {std::vector<int>{0, 2, 1, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {0, 1, 3, 2}}) {
    const Tensor y = permute(x, perm);
    const std::vector<float> yv = y.to_vector();
    for (size_t d = 0; d < perm.size(); ++d) ASSERT_EQ(y.size(int(d)), x.size(perm[d]));
    for (const auto& i : indices(y.shape())) {
      std::vector<int64_t> src(4);
      for (size_t d = 0; d < 4; ++d) src[size_t(perm[d])] = i[d];
      ASSERT_EQ(at(yv, y.shape(), i), at(xv, x.shape(), src));
    }
  }
  const Tensor t = transpose(x, 1, -1);
  EXPECT_EQ(t.shape(), (Shape{2, 5, 4, 3}));
  EXPECT_EQ(t.to_vector(), permute(x, {0, 3, 2, 1}).to_vector());
  EXPECT_EQ(permute(x, {0, 1, 2, 3}).to_vector(), xv);
  EXPECT_TRUE(contiguous(x).is_same(x));
  EXPECT_THROW(permute(x, {0, 1, 2}), ShapeError);
  EXPECT_THROW(permute(x, {0, 1, 1, 3}), ShapeError);
  EXPECT_THROW(transpose(x, 0, 4), ShapeError);
}

TEST(ShapeOps, GradientsOfPermuteExpandNarrowSelectSplit) {
  Tensor x = leaf(random_tensor({2, 3, 4}, 12));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return permute(in[0], {2, 0, 1});
      },
      {x}, {}, "permute");
  check_gradients([](const std::vector<Tensor>& in) { return transpose(in[0], 0, 2); }, {x}, {},
                  "transpose");
  check_gradients([](const std::vector<Tensor>& in) { return narrow(in[0], 2, -3, 2); }, {x}, {},
                  "narrow");
  check_gradients([](const std::vector<Tensor>& in) { return select(in[0], 1, -1); }, {x}, {},
                  "select");
  check_gradients([](const std::vector<Tensor>& in) { return unsqueeze(in[0], 1) * 2.0f; }, {x}, {},
                  "unsqueeze");
  check_gradients(
      [](const std::vector<Tensor>& in) {
        auto pieces = split(in[0], std::vector<int64_t>{1, 3}, 2);
        return cat({pieces[1], pieces[0] * 3.0f}, 2);
      },
      {x}, {}, "split sizes");
  Tensor row = leaf(random_tensor({3, 1}, 13));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return expand(in[0], {2, 3, 4});
      },
      {row}, {}, "expand");
}

TEST(ShapeOps, ExpandRepeatsSizeOneAndAddsLeadingDimensions) {
  Tensor x = Tensor::from_host({1, 2, 3}, {3, 1});
  const Tensor y = expand(x, {2, -1, 2});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  Tensor g = leaf(Tensor::from_host({1, 2, 3}, {3, 1}));
  sum(expand(g, {4, 3, 5})).backward();
  EXPECT_EQ(g.grad().to_vector(), std::vector<float>(3, 20.0f)) << "4 x 5 repeats of each";
  try {
    expand(x, {3, 2, 2});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[3, 1]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 2, 2]"), std::string::npos) << msg;
  }
  EXPECT_THROW(expand(x, {3}), ShapeError);
  EXPECT_THROW(expand(x, {-1, 3, 1}), ShapeError);
}

TEST(ShapeOps, NarrowSelectSqueezeUnsqueezeAndSplitAsTorch) {
  Tensor x = Tensor::from_host({0, 1, 2, 3, 4, 5}, {2, 3});
  EXPECT_EQ(narrow(x, 1, 1, 2).to_vector(), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(select(x, 1, -1).shape(), (Shape{2}));
  EXPECT_EQ(select(x, 1, -1).to_vector(), (std::vector<float>{2, 5}));
  EXPECT_EQ(select(x, 0, 1).to_vector(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(unsqueeze(x, -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(unsqueeze(x, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(squeeze(unsqueeze(x, 1), 1).shape(), (Shape{2, 3}));
  EXPECT_EQ(squeeze(x, 0).shape(), (Shape{2, 3})) << "a dimension of size 2 stays";
  const auto pieces = split(x, 2, 1);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].to_vector(), (std::vector<float>{0, 1, 3, 4}));
  EXPECT_EQ(pieces[1].to_vector(), (std::vector<float>{2, 5}));
  EXPECT_THROW(narrow(x, 1, 2, 2), ShapeError);
  EXPECT_THROW(select(x, 0, 2), ShapeError);
  EXPECT_THROW(unsqueeze(x, 3), ShapeError);
  EXPECT_THROW(split(x, 0, 1), ValueError);
  EXPECT_THROW(split(x, std::vector<int64_t>{1, 1}, 1), ShapeError);
}
