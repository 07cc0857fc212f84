#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

TEST(Reduction, ValuesMatchDirectSums) {
  Tensor x = Tensor::from_host({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_FLOAT_EQ(sum(x).item(), 21.0f);
  EXPECT_FLOAT_EQ(mean(x).item(), 3.5f);
  EXPECT_EQ(sum(x, 0).to_vector(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum(x, 1).to_vector(), (std::vector<float>{6, 15}));
  EXPECT_EQ(sum(x, -1, true).shape(), Shape({2, 1}));
  EXPECT_EQ(mean(x, 0).to_vector(), (std::vector<float>{2.5, 3.5, 4.5}));
  EXPECT_EQ(max(x, 1).to_vector(), (std::vector<float>{3, 6}));
  EXPECT_EQ(argmax(Tensor::from_host({1, 9, 3, 7, 2, 7}, {2, 3}), 1).to_vector(),
            (std::vector<float>{1, 0}));
}

TEST(Reduction, SumOfManyElementsKeepsPrecision) {
  // 2^24 + 1 cannot be reached by adding ones in float; the double accumulator can.
  Tensor x = Tensor::ones({(1 << 24) + 64});
  EXPECT_DOUBLE_EQ(static_cast<double>(sum(x).item()), static_cast<double>((1 << 24) + 64));
}

TEST(Reduction, GradientsMatchFiniteDifferences) {
  uint64_t seed = 1;
  for (const Shape& shape : {Shape{5}, Shape{1, 4}, Shape{3, 4}, Shape{2, 3, 5}}) {
    Tensor x = leaf(random_tensor(shape, seed++));
    check_gradients([](const std::vector<Tensor>& in) { return sum(in[0]); }, {x}, {}, "sum");
    check_gradients([](const std::vector<Tensor>& in) { return mean(in[0]); }, {x}, {}, "mean");
    for (int dim = 0; dim < shape.rank(); ++dim) {
      for (bool keep : {false, true}) {
        check_gradients([&](const std::vector<Tensor>& in) { return sum(in[0], dim, keep); }, {x},
                        {}, "sum dim " + std::to_string(dim));
        check_gradients([&](const std::vector<Tensor>& in) { return mean(in[0], dim, keep); }, {x},
                        {}, "mean dim " + std::to_string(dim));
        check_gradients([&](const std::vector<Tensor>& in) { return max(in[0], dim, keep); }, {x},
                        {}, "max dim " + std::to_string(dim));
      }
    }
  }
}

TEST(Reduction, MaxWithIndicesGivesValuesAndTheirFirstPositions) {
  // Rows {1, 9, 3} and {7, 2, 7}: maxima 9 and 7, at 1 and at the first 7 (0);
  // columns: maxima 7, 9, 7 at rows 1, 0, 1.
  const Tensor x = leaf(Tensor::from_host({1, 9, 3, 7, 2, 7}, {2, 3}));
  auto [values, indices] = max_with_indices(x, 1);
  EXPECT_EQ(values.to_vector(), (std::vector<float>{9, 7}));
  EXPECT_EQ(indices.to_vector(), (std::vector<float>{1, 0}));
  auto [col_values, col_indices] = max_with_indices(x, 0, /*keepdim=*/true);
  EXPECT_EQ(col_values.shape(), Shape({1, 3}));
  EXPECT_EQ(col_values.to_vector(), (std::vector<float>{7, 9, 7}));
  EXPECT_EQ(col_indices.to_vector(), (std::vector<float>{1, 0, 1}));
  // The values carry max's gradient: 1 at each first maximum.
  sum(values).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 1, 0, 1, 0, 0}));
}

TEST(Reduction, BadDimensionsThrow) {
  EXPECT_THROW(sum(Tensor::zeros({2, 3}), 2), ShapeError);
  EXPECT_THROW(max(Tensor::scalar(1.0f), 0), ShapeError);
  EXPECT_THROW(mean(Tensor::zeros({0})), ShapeError);
}

TEST(Reduction, CountCorrectMatchesArgmaxOnTheHost) {
  const Tensor logits = test::random_tensor({50, 7}, 3);
  std::vector<float> labels(50);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>((i * 5) % 7);
  const std::vector<float> x = logits.to_vector();
  int want = 0;
  for (size_t b = 0; b < 50; ++b) {
    size_t best = 0;
    for (size_t c = 1; c < 7; ++c) {
      if (x[b * 7 + c] > x[b * 7 + best]) best = c;
    }
    want += static_cast<float>(best) == labels[b];
  }
  ASSERT_GT(want, 0);  // the check can tell a count from zero
  EXPECT_EQ(count_correct(logits, Tensor::from_host(labels, {50})).item(),
            static_cast<float>(want));
  // A logit row whose target is its argmax counts; ties go to the first class.
  EXPECT_EQ(
      count_correct(Tensor::from_host({1, 1, 0, 0, 2, 2}, {2, 3}), Tensor::from_host({0, 1}, {2}))
          .item(),
      2.0f);
  EXPECT_THROW(count_correct(logits, Tensor::zeros({49})), ShapeError);
}
