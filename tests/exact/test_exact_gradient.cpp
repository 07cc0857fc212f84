#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>

#include "exact/exact_gradient.hpp"
#include "test_util.hpp"

using namespace kdp;
using kdp::exact::ExactGradient;
using kdp::exact::shard_rows;
using kdp::exact::strided_rows;

// Row l of rank r is position r + l R of the global batch; shard j holds the
// positions p with p mod 12 = j: at every rank count dividing 12 the ranks'
// shards together are the same sets of positions.
TEST(ExactGradient, ShardsAreTheSamePositionsAtEveryRankCount) {
  const int64_t batch = 29;  // an uneven last batch too
  for (int ranks : {1, 2, 3, 4, 6, 12}) {
    std::vector<std::set<int64_t>> shards(12);
    for (int r = 0; r < ranks; ++r) {
      const int64_t rows = (batch - r + ranks - 1) / ranks;
      const auto mine = shard_rows(rows, r, ranks, 12);
      for (size_t j = 0; j < 12; ++j) {
        EXPECT_EQ(mine[j].shard, static_cast<int>(j));
        for (int64_t k = 0; k < mine[j].count; ++k) {
          shards[j].insert(r + (mine[j].first + k * mine[j].step) * ranks);
        }
      }
    }
    for (int64_t j = 0; j < 12; ++j) {
      std::set<int64_t> want;
      for (int64_t p = j; p < batch; p += 12) want.insert(p);
      EXPECT_EQ(shards[static_cast<size_t>(j)], want) << ranks << " ranks, shard " << j;
    }
  }
}

// The sum of the kept shards does not depend on their order (float sums do),
// and is the exact sum to within the grid (2^-46 of the largest element).
TEST(ExactGradient, TheSumIsExactAndInAnyOrder) {
  dist::Communicator comm = dist::Communicator::world();
  Tensor p = Tensor::zeros({1000});
  const optim::NamedParameters params{{"p", p}};
  std::vector<std::vector<float>> shards;
  for (uint64_t s = 0; s < 5; ++s) {
    std::vector<float> g = test::random_tensor({1000}, 70 + s).to_vector();
    for (size_t i = 0; i < g.size(); i += 7) g[i] *= 1e-6f;  // magnitudes far apart
    shards.push_back(g);
  }
  const auto sum_in = [&](const std::vector<size_t>& order) {
    ExactGradient exact(params, comm, get_default_device());
    for (size_t k : order) {
      p.set_grad(Tensor::from_host(shards[k], {1000}));
      exact.keep_shard();
    }
    exact.reduce(12);
    return p.grad().to_vector();
  };
  const std::vector<float> a = sum_in({0, 1, 2, 3, 4}), b = sum_in({4, 2, 0, 3, 1});
  EXPECT_EQ(a, b);
  float largest = 0.0f;
  for (const auto& g : shards)
    for (float v : g) largest = std::max(largest, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    double exact = 0.0;
    for (const auto& g : shards) exact += g[i];  // 5 floats: exact in double
    // float's rounding of the sum, and half a grid step (2^-46 of the
    // largest, at most) per shard.
    ASSERT_NEAR(a[i], exact, std::fabs(exact) * 1e-7 + largest * 5 * std::ldexp(1.0, -46)) << i;
  }
}

// A shard's rows of a batch, copied on the device: rows first, first + step, ...
TEST(ExactGradient, StridedRowsTakesAShardsRows) {
  const Tensor x = test::random_tensor({7, 2, 3}, 5);
  const std::vector<float> all = x.to_vector();
  const Tensor rows = strided_rows(x, 1, 3, 2);  // rows 1 and 4
  ASSERT_EQ(rows.shape(), Shape({2, 2, 3}));
  const std::vector<float> got = rows.to_vector();
  const std::vector<float> want(all.begin() + 6, all.begin() + 12);
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 6), want);
  EXPECT_EQ(std::vector<float>(got.begin() + 6, got.end()),
            std::vector<float>(all.begin() + 24, all.begin() + 30));
}

// A NaN or Inf in a kept shard's gradient, or in the products a one pass hands
// over (its input or its output gradient), stops the sum with an error that
// names the parameter.
TEST(ExactGradient, ANonFiniteGradientNamesItsParameter) {
  dist::Communicator comm = dist::Communicator::world();
  Tensor w = Tensor::zeros({3, 4}), b = Tensor::zeros({3});
  const optim::NamedParameters params{{"layer.weight", w}, {"layer.bias", b}};
  const auto message = [&](const std::function<void(ExactGradient&)>& fill) {
    ExactGradient exact(params, comm, get_default_device());
    fill(exact);
    try {
      exact.reduce(12);
    } catch (const NumericalError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  for (const float bad : {nan, inf}) {
    // A kept shard.
    EXPECT_NE(message([&](ExactGradient& exact) {
                std::vector<float> g(12, 0.5f);
                g[5] = bad;
                w.set_grad(Tensor::from_host(g, {3, 4}));
                b.set_grad(Tensor::zeros({3}));
                exact.keep_shard();
              }).find("the gradient of 'layer.weight' holds NaN or Inf"),
              std::string::npos);
    // A one pass's products: 2 shards of 2 rows, x [4, 4], dy [4, 3].
    for (const bool in_x : {true, false}) {
      const std::string got = message([&](ExactGradient& exact) {
        std::vector<float> x(16, 0.25f), dy(12, 0.5f);
        (in_x ? x[9] : dy[4]) = bad;
        exact.use_one_pass();
        exact.defer(0, 1, Tensor::from_host(dy, {4, 3}), Tensor::from_host(x, {4, 4}),
                    Precision::fp32, {0, 2, 4}, {0, 1});
      });
      EXPECT_NE(got.find("the gradient of 'layer.weight' holds NaN or Inf"), std::string::npos)
          << got;
    }
  }
  // Finite products go through: each element of the weight's gradient is the
  // sum of 4 rows of 0.5 x 0.25, the bias's of 4 rows of 0.5.
  EXPECT_EQ(message([&](ExactGradient& exact) {
              exact.use_one_pass();
              exact.defer(0, 1, Tensor::from_host(std::vector<float>(12, 0.5f), {4, 3}),
                          Tensor::from_host(std::vector<float>(16, 0.25f), {4, 4}), Precision::fp32,
                          {0, 2, 4}, {0, 1});
            }),
            "no error");
  EXPECT_EQ(w.grad().to_vector(), std::vector<float>(12, 0.5f));
  EXPECT_EQ(b.grad().to_vector(), std::vector<float>(3, 2.0f));
}
