#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

// Distinct values (a permutation of a grid), so that maxima are never tied and
// finite differences never cross from one maximum to another.
Tensor distinct(const Shape& shape, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * static_cast<float>(i);
  std::mt19937_64 gen(seed);
  std::shuffle(v.begin(), v.end(), gen);
  return Tensor::from_host(v, shape);
}

// Pooling by its definition on the host: max or mean over the window of (y, x).
std::vector<float> direct_pool(const std::vector<float>& in, int64_t planes, int64_t h, int64_t w,
                               Size2 k, Size2 s, Size2 p, bool max, bool count_pad, int64_t oh,
                               int64_t ow) {
  std::vector<float> out;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x) {
        double best = -INFINITY, sum = 0;
        int64_t count = 0, padded = 0;
        for (int64_t i = 0; i < k.h; ++i)
          for (int64_t j = 0; j < k.w; ++j) {
            const int64_t iy = y * s.h - p.h + i, ix = x * s.w - p.w + j;
            if (iy < h + p.h && ix < w + p.w) ++padded;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const float v = in[static_cast<size_t>((pl * h + iy) * w + ix)];
            best = std::max<double>(best, v);
            sum += v;
            ++count;
          }
        out.push_back(
            static_cast<float>(max ? best : sum / static_cast<double>(count_pad ? padded : count)));
      }
  return out;
}

}  // namespace

TEST(Pooling, MaxAndAverageMatchTheDefinition) {
  struct Case {
    Size2 k, s, p;
    bool ceil;
  };
  uint64_t seed = 1;
  for (const Case& c :
       {Case{2, 2, 0, false}, Case{3, 2, 1, false}, Case{{2, 3}, {1, 2}, {1, 1}, false},
        Case{3, 2, 0, true}, Case{2, 1, 0, false}}) {
    const Tensor x = random_tensor({2, 3, 7, 6}, seed++);
    const int64_t oh = window_output_size(7, c.k.h, c.s.h, c.p.h, 1, c.ceil);
    const int64_t ow = window_output_size(6, c.k.w, c.s.w, c.p.w, 1, c.ceil);
    const Tensor m = max_pool2d(x, c.k, c.s, c.p, 1, c.ceil);
    ASSERT_EQ(m.shape(), Shape({2, 3, oh, ow}));
    test::expect_close(m.to_vector(),
                       direct_pool(x.to_vector(), 6, 7, 6, c.k, c.s, c.p, true, true, oh, ow), 0, 0,
                       "max");
    for (bool count_pad : {true, false}) {
      const Tensor a = avg_pool2d(x, c.k, c.s, c.p, c.ceil, count_pad);
      test::expect_close(
          a.to_vector(),
          direct_pool(x.to_vector(), 6, 7, 6, c.k, c.s, c.p, false, count_pad, oh, ow), 1e-6, 1e-5,
          "avg");
    }
  }
  // The stride defaults to the kernel: 28 -> 14.
  EXPECT_EQ(max_pool2d(Tensor::zeros({1, 1, 28, 28}), 2).shape(), Shape({1, 1, 14, 14}));
  // ceil_mode keeps a last, partial window (PyTorch: 7 -> 4 with k 2, s 2).
  EXPECT_EQ(max_pool2d(Tensor::zeros({1, 1, 7, 7}), 2, 2, 0, 1, true).shape(), Shape({1, 1, 4, 4}));
}

TEST(Pooling, MaxTiesGoToTheFirstPositionAndNaNWins) {
  // A window of equal values: the gradient goes to its first element only.
  Tensor x = leaf(Tensor::full({1, 1, 2, 2}, 3.0f));
  max_pool2d(x, 2).backward(Tensor::ones({1, 1, 1, 1}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1, 0, 0, 0}));
  const float nan = std::nanf("");
  Tensor y = leaf(Tensor::from_host({1, nan, 5, 2}, {1, 1, 2, 2}));
  const Tensor m = max_pool2d(y, 2);
  EXPECT_TRUE(std::isnan(m.to_vector()[0]));
  m.backward(Tensor::ones({1, 1, 1, 1}));
  EXPECT_EQ(y.grad().to_vector()[1], 1.0f);
  EXPECT_EQ(y.grad().to_vector()[2], 0.0f);
}

TEST(Pooling, GradientsMatchFiniteDifferences) {
  uint64_t seed = 10;
  for (Size2 k : {Size2{2}, Size2{3, 2}}) {
    for (Size2 s : {Size2{2}, Size2{1}}) {
      for (Size2 p : {Size2{0}, Size2{1}}) {
        const Shape shape{2, 2, 6, 5};
        check_gradients([&](const std::vector<Tensor>& in) { return max_pool2d(in[0], k, s, p); },
                        {leaf(distinct(shape, seed++))}, {}, "max_pool2d");
        for (bool count_pad : {true, false}) {
          check_gradients(
              [&](const std::vector<Tensor>& in) {
                return avg_pool2d(in[0], k, s, p, false, count_pad);
              },
              {leaf(random_tensor(shape, seed++))}, {}, "avg_pool2d");
        }
      }
    }
  }
  // Dilated max pooling.
  check_gradients([&](const std::vector<Tensor>& in) { return max_pool2d(in[0], 2, 1, 0, 2); },
                  {leaf(distinct({1, 2, 6, 6}, 77))}, {}, "dilated max_pool2d");
}

TEST(Pooling, AdaptiveAverageRegionsAndGradients) {
  const Tensor x = random_tensor({2, 3, 5, 7}, 5);
  // 1x1: the global mean of every plane.
  const std::vector<float> xv = x.to_vector(), g = adaptive_avg_pool2d(x, 1).to_vector();
  for (int64_t pl = 0; pl < 6; ++pl) {
    double s = 0;
    for (int64_t i = 0; i < 35; ++i) s += xv[static_cast<size_t>(pl * 35 + i)];
    EXPECT_NEAR(g[static_cast<size_t>(pl)], s / 35, 1e-6);
  }
  // 5x7 -> 3x2: rows [0, 2), [1, 4), [3, 5); columns [0, 4), [3, 7).
  const std::vector<float> r = adaptive_avg_pool2d(x, {3, 2}).to_vector();
  double s = 0;
  for (int64_t y = 1; y < 4; ++y)
    for (int64_t c = 3; c < 7; ++c) s += xv[static_cast<size_t>(y * 7 + c)];
  EXPECT_NEAR(r[3], s / 12, 1e-6);  // plane 0, region (1, 1)
  for (Size2 out : {Size2{1}, Size2{3, 2}, Size2{5, 7}, Size2{4, 3}}) {
    check_gradients([&](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], out); },
                    {leaf(random_tensor({2, 2, 5, 7}, 9))}, {}, "adaptive " + out.str());
  }
}

TEST(Pooling, BadArgumentsAreNamed) {
  const Tensor x = Tensor::zeros({1, 1, 4, 4});
  EXPECT_THROW(max_pool2d(x, 5), ShapeError);
  EXPECT_THROW(max_pool2d(x, 2, 2, 2), ValueError);  // padding above half the kernel
  EXPECT_THROW(max_pool2d(x.reshape({16}), 2), ShapeError);
  EXPECT_THROW(avg_pool2d(x, 0), ValueError);
  EXPECT_THROW(adaptive_avg_pool2d(x, 0), ShapeError);
}

// 1-d pools of [N, C, L]: the max and the mean of each window along L, and
// their gradients against finite differences.
TEST(Pool1d, MaxAndMeanOfWindowsAlongTheLength) {
  const Tensor x = test::random_tensor({2, 3, 7}, 11);
  const std::vector<float> v = x.to_vector();
  const Tensor m = max_pool1d(x, 2), a = avg_pool1d(x, 3, 2);
  ASSERT_EQ(m.shape(), Shape({2, 3, 3}));
  ASSERT_EQ(a.shape(), Shape({2, 3, 3}));
  const std::vector<float> mv = m.to_vector(), av = a.to_vector();
  for (size_t row = 0; row < 6; ++row) {
    for (size_t j = 0; j < 3; ++j) {
      const float* r = &v[row * 7];
      EXPECT_EQ(mv[row * 3 + j], std::max(r[2 * j], r[2 * j + 1]));
      EXPECT_NEAR(av[row * 3 + j], (r[2 * j] + r[2 * j + 1] + r[2 * j + 2]) / 3.0f, 1e-6);
    }
  }
  test::check_gradients([](const std::vector<Tensor>& t) { return max_pool1d(t[0], 2); },
                        {test::leaf(x)}, {}, "max_pool1d");
  test::check_gradients([](const std::vector<Tensor>& t) { return avg_pool1d(t[0], 3, 2); },
                        {test::leaf(x)}, {}, "avg_pool1d");
  EXPECT_THROW(max_pool1d(test::random_tensor({2, 7}, 1), 2), ShapeError);
  nn::MaxPool1d pool(2);
  EXPECT_EQ(pool.forward(x).to_vector(), mv);
}

// The 1-d pools take torch's padding, dilation, ceil_mode and
// count_include_pad: each output against its window written out.
TEST(Pool1d, PaddingDilationAndCeilModeAsTorchHasThem) {
  const Tensor x = test::random_tensor({1, 2, 6}, 12);
  const std::vector<float> v = x.to_vector();
  const float low = -std::numeric_limits<float>::infinity();
  // Windows of 3 with dilation 2, padding 1 (counted as -inf), stride 2:
  // positions 2j - 1, 2j + 1, 2j + 3; floor((6 + 2 - 4 - 1) / 2) + 1 = 2
  // outputs, and ceil_mode makes it 3 (the last starts at 3, inside).
  const Tensor m = max_pool1d(x, 3, 2, 1, 2, true);
  ASSERT_EQ(m.shape(), Shape({1, 2, 3}));
  // Windows of 2 with padding 1 and stride 2, ceil_mode: starts -1, 1, 3, 5.
  const Tensor with_pad = avg_pool1d(x, 2, 2, 1, true, true);
  const Tensor without_pad = avg_pool1d(x, 2, 2, 1, true, false);
  ASSERT_EQ(with_pad.shape(), Shape({1, 2, 4}));
  const auto at = [&](int64_t c, int64_t i) { return i < 0 || i >= 6 ? low : v[c * 6 + i]; };
  for (int64_t c = 0; c < 2; ++c) {
    for (int64_t j = 0; j < 4; ++j) {
      if (j < 3) {
        const float expect = std::max({at(c, 2 * j - 1), at(c, 2 * j + 1), at(c, 2 * j + 3)});
        EXPECT_EQ(m.to_vector()[c * 3 + j], expect) << c << " " << j;
      }
      float sum = 0.0f;
      int inside = 0;
      for (int64_t i = 2 * j - 1; i <= 2 * j; ++i) {
        if (i >= 0 && i < 6) sum += v[c * 6 + i], ++inside;
      }
      // PyTorch's divisor with count_include_pad: the window clipped to the
      // padded input [-1, 7), which every window of 2 here lies inside.
      const float padded = 2.0f;
      EXPECT_NEAR(with_pad.to_vector()[c * 4 + j], sum / padded, 1e-6) << c << " " << j;
      EXPECT_NEAR(without_pad.to_vector()[c * 4 + j], sum / inside, 1e-6) << c << " " << j;
    }
  }
  EXPECT_EQ(nn::MaxPool1d(3, 2, 1, 2, true).forward(x).to_vector(), m.to_vector());
  EXPECT_EQ(nn::AvgPool1d(2, 2, 1, true, false).forward(x).to_vector(), without_pad.to_vector());
  test::check_gradients(
      [](const std::vector<Tensor>& t) { return avg_pool1d(t[0], 2, 2, 1, true, false); },
      {test::leaf(x)}, {}, "avg_pool1d with padding");
}

namespace {

// A 3-d pool by its definition on the host: the max or the mean of the box
// of (z, y, x), PyTorch's divisor (the box clipped to the padded input, or to
// the input alone without count_include_pad).
std::vector<float> direct_pool3d(const std::vector<float>& in, const Shape& shape, Size3 k, Size3 s,
                                 Size3 p, bool max, bool count_pad, const Shape& out) {
  const int64_t planes = shape[0] * shape[1], d = shape[2], h = shape[3], w = shape[4];
  std::vector<float> res;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t z = 0; z < out[2]; ++z)
      for (int64_t y = 0; y < out[3]; ++y)
        for (int64_t x = 0; x < out[4]; ++x) {
          double best = -INFINITY, sum = 0;
          int64_t count = 0, padded = 0;
          for (int64_t a = 0; a < k.d; ++a)
            for (int64_t i = 0; i < k.h; ++i)
              for (int64_t j = 0; j < k.w; ++j) {
                const int64_t iz = z * s.d - p.d + a, iy = y * s.h - p.h + i,
                              ix = x * s.w - p.w + j;
                if (iz < d + p.d && iy < h + p.h && ix < w + p.w) ++padded;
                if (iz < 0 || iz >= d || iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                const float v = in[static_cast<size_t>(((pl * d + iz) * h + iy) * w + ix)];
                best = std::max<double>(best, v);
                sum += v;
                ++count;
              }
          res.push_back(static_cast<float>(
              max ? best : sum / static_cast<double>(count_pad ? padded : count)));
        }
  return res;
}

}  // namespace

// 3-d pools of [N, C, D, H, W]: the definition for several boxes, strides
// and paddings (ceil_mode included), ties to the first position in (z, y, x)
// order, gradients against finite differences, and the modules.
TEST(Pool3d, MaxAndMeanOfBoxesMatchTheDefinition) {
  struct Case {
    Size3 k, s, p;
    bool ceil;
  };
  const Shape shape{2, 2, 5, 6, 5};
  uint64_t seed = 40;
  for (const Case& c :
       {Case{2, 2, 0, false}, Case{3, 2, 1, false}, Case{{3, 2, 1}, {1, 2, 1}, {1, 1, 0}, false},
        Case{2, 2, 0, true}, Case{{2, 3, 3}, {2, 2, 3}, {1, 1, 1}, true}}) {
    const Tensor x = distinct(shape, seed++);
    const Tensor m = max_pool3d(x, c.k, c.s, c.p, 1, c.ceil);
    const Shape want{2, 2, window_output_size(5, c.k.d, c.s.d, c.p.d, 1, c.ceil),
                     window_output_size(6, c.k.h, c.s.h, c.p.h, 1, c.ceil),
                     window_output_size(5, c.k.w, c.s.w, c.p.w, 1, c.ceil)};
    ASSERT_EQ(m.shape(), want) << c.k.str();
    EXPECT_EQ(m.to_vector(), direct_pool3d(x.to_vector(), shape, c.k, c.s, c.p, true, false, want));
    for (bool count_pad : {true, false}) {
      const Tensor a = avg_pool3d(x, c.k, c.s, c.p, c.ceil, count_pad);
      ASSERT_EQ(a.shape(), want);
      test::expect_close(a.to_vector(),
                         direct_pool3d(x.to_vector(), shape, c.k, c.s, c.p, false, count_pad, want),
                         1e-5, 1e-6, "avg_pool3d " + c.k.str());
    }
    check_gradients([&](const std::vector<Tensor>& in) { return max_pool3d(in[0], c.k, c.s, c.p); },
                    {leaf(x)}, {}, "max_pool3d " + c.k.str());
    check_gradients(
        [&](const std::vector<Tensor>& in) {
          return avg_pool3d(in[0], c.k, c.s, c.p, false, false);
        },
        {leaf(random_tensor(shape, seed++))}, {}, "avg_pool3d " + c.k.str());
  }
  // A box of equal values sends its gradient to its first element alone.
  Tensor t = leaf(Tensor::full({1, 1, 2, 2, 2}, 3.0f));
  max_pool3d(t, 2).backward(Tensor::ones({1, 1, 1, 1, 1}));
  EXPECT_EQ(t.grad().to_vector(), (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 0}));
  // Dilation, and [C, D, H, W] without a batch.
  const Tensor u = distinct({3, 5, 5, 5}, 9);
  EXPECT_EQ(max_pool3d(u, 2, 1, 0, 2).to_vector(),
            max_pool3d(u.reshape({1, 3, 5, 5, 5}), 2, 1, 0, 2).to_vector());
  check_gradients([&](const std::vector<Tensor>& in) { return max_pool3d(in[0], 2, 1, 0, 2); },
                  {leaf(u)}, {}, "dilated max_pool3d");
  EXPECT_THROW(max_pool3d(Tensor::zeros({1, 1, 4, 4}), 2), ShapeError);           // an image
  EXPECT_THROW(max_pool3d(Tensor::zeros({1, 1, 1, 4, 4}), 2), ShapeError);        // too shallow
  EXPECT_THROW(avg_pool3d(Tensor::zeros({1, 1, 4, 4, 4}), 2, 2, 2), ValueError);  // padding
  nn::MaxPool3d max_layer(2);
  nn::AvgPool3d avg_layer(2);
  EXPECT_EQ(max_layer.forward(distinct(shape, 1)).to_vector(),
            max_pool3d(distinct(shape, 1), 2).to_vector());
  EXPECT_EQ(avg_layer.forward(distinct(shape, 1)).to_vector(),
            avg_pool3d(distinct(shape, 1), 2).to_vector());
}
