#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

struct ConvCase {
  const char* what;
  int64_t n, c, h, w, o, kh, kw;
  Size2 stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// The definition, element by element, in double on the host.
std::vector<float> direct_conv2d(const std::vector<float>& x, const std::vector<float>& w,
                                 const std::vector<float>& b, const ConvCase& k, int64_t oh,
                                 int64_t ow) {
  const int64_t cg = k.c / k.groups, og = k.o / k.groups;
  std::vector<float> y(static_cast<size_t>(k.n * k.o * oh * ow));
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t yy = 0; yy < oh; ++yy)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = k.bias ? b[static_cast<size_t>(o)] : 0.0;
          const int64_t g = o / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t iy = yy * k.stride.h - k.padding.h + i * k.dilation.h;
                const int64_t ix = xx * k.stride.w - k.padding.w + j * k.dilation.w;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const int64_t c = g * cg + ci;
                acc += static_cast<double>(
                           w[static_cast<size_t>(((o * cg + ci) * k.kh + i) * k.kw + j)]) *
                       x[static_cast<size_t>(((n * k.c + c) * k.h + iy) * k.w + ix)];
              }
          y[static_cast<size_t>(((n * k.o + o) * oh + yy) * ow + xx)] = static_cast<float>(acc);
        }
  return y;
}

const std::vector<ConvCase>& cases() {
  static const std::vector<ConvCase> c = {
      {"3x3", 2, 3, 6, 5, 4, 3, 3, 1, 0, 1, 1, true},
      {"stride 2, padding 1", 2, 2, 7, 6, 3, 3, 3, 2, 1, 1, 1, true},
      {"non-square kernel and stride", 1, 2, 6, 7, 2, 2, 3, {2, 1}, {1, 0}, 1, 1, false},
      {"dilation 2", 2, 2, 7, 7, 2, 3, 3, 1, 2, 2, 1, true},
      {"2 groups", 2, 4, 5, 5, 6, 3, 3, 1, 1, 1, 2, true},
      {"depthwise", 2, 3, 5, 4, 3, 3, 2, 1, 1, 1, 3, true},
      {"depthwise multiplier 2", 1, 2, 5, 5, 4, 3, 3, 2, 1, 1, 2, false},
      {"1x1", 3, 4, 3, 3, 5, 1, 1, 1, 0, 1, 1, true},
      {"kernel as large as the padded input", 1, 1, 3, 3, 2, 5, 5, 1, 1, 1, 1, true},
  };
  return c;
}

}  // namespace

TEST(Conv2d, MatchesTheDefinition) {
  uint64_t seed = 1;
  for (const ConvCase& k : cases()) {
    const Tensor x = random_tensor({k.n, k.c, k.h, k.w}, seed++);
    const Tensor w = random_tensor({k.o, k.c / k.groups, k.kh, k.kw}, seed++);
    const Tensor b = random_tensor({k.o}, seed++);
    const Tensor y = conv2d(x, w, k.bias ? b : Tensor(), k.stride, k.padding, k.dilation, k.groups);
    const int64_t oh = window_output_size(k.h, k.kh, k.stride.h, k.padding.h, k.dilation.h);
    const int64_t ow = window_output_size(k.w, k.kw, k.stride.w, k.padding.w, k.dilation.w);
    ASSERT_EQ(y.shape(), Shape({k.n, k.o, oh, ow})) << k.what;
    test::expect_close(y.to_vector(),
                       direct_conv2d(x.to_vector(), w.to_vector(), b.to_vector(), k, oh, ow), 1e-5,
                       1e-5, k.what);
  }
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  uint64_t seed = 100;
  for (const ConvCase& k : cases()) {
    std::vector<Tensor> in;
    in.reserve(3);
    in.push_back(leaf(random_tensor({k.n, k.c, k.h, k.w}, seed++)));
    in.push_back(leaf(random_tensor({k.o, k.c / k.groups, k.kh, k.kw}, seed++)));
    if (k.bias) in.push_back(leaf(random_tensor({k.o}, seed++)));
    check_gradients(
        [&](const std::vector<Tensor>& t) {
          return conv2d(t[0], t[1], k.bias ? t[2] : Tensor(), k.stride, k.padding, k.dilation,
                        k.groups);
        },
        in, {}, k.what);
  }
}

TEST(Conv2d, OnlyTheWantedGradientsAreComputed) {
  // A frozen weight: the input's gradient alone; a constant input: the weight's.
  const Tensor x = leaf(random_tensor({2, 2, 4, 4}, 1));
  const Tensor w = random_tensor({3, 2, 3, 3}, 2);
  conv2d(x, w).backward(Tensor::ones({2, 3, 2, 2}));
  EXPECT_TRUE(x.grad().defined());
  const Tensor x2 = random_tensor({2, 2, 4, 4}, 3);
  const Tensor w2 = leaf(random_tensor({3, 2, 3, 3}, 4));
  conv2d(x2, w2).backward(Tensor::ones({2, 3, 2, 2}));
  EXPECT_TRUE(w2.grad().defined());
  // With a 1-valued output gradient, the weight's gradient is the sum of the
  // input windows: every output position sees one window per image.
  const std::vector<float> xv = x2.to_vector(), gw = w2.grad().to_vector();
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        double s = 0;
        for (int64_t n = 0; n < 2; ++n)
          for (int64_t y = 0; y < 2; ++y)
            for (int64_t xx = 0; xx < 2; ++xx)
              s += xv[static_cast<size_t>(((n * 2 + c) * 4 + y + i) * 4 + xx + j)];
        EXPECT_NEAR(gw[static_cast<size_t>((c * 3 + i) * 3 + j)], s, 1e-4);  // output channel 0
      }
}

TEST(Conv2d, ShapesThatDoNotFitAreNamed) {
  const Tensor x = random_tensor({2, 3, 5, 5}, 1);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              conv2d(x, random_tensor({4, 2, 3, 3}, 2));
            }).find("[4, 2, 3, 3]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              conv2d(x, random_tensor({4, 3, 7, 7}, 2));
            }).find("does not fit"),
            std::string::npos);
  EXPECT_NE(message([&] {
              conv2d(x, random_tensor({4, 1, 3, 3}, 2), Tensor(), 1, 0, 1, 2);
            }).find("group"),
            std::string::npos);
  EXPECT_THROW(conv2d(x.reshape({6, 25}), random_tensor({4, 3, 3, 3}, 2)), ShapeError);
  EXPECT_THROW(conv2d(x, random_tensor({4, 3, 3, 3}, 2), random_tensor({3}, 3)), ShapeError);
  EXPECT_THROW(conv2d(x, random_tensor({4, 3, 3, 3}, 2), Tensor(), 0), ValueError);
}

TEST(Conv2d, TheFusedConvolutionAndReluEqualsBothOps) {
  // Forward and gradients equal relu(conv2d(...)) (each tested on its own);
  // finite differences as well, where no pre-activation lies within their
  // step of ReLU's kink.
  uint64_t seed = 300;
  int differenced = 0;
  for (const ConvCase& k : cases()) {
    const Tensor x = random_tensor({k.n, k.c, k.h, k.w}, seed++);
    const Tensor w = random_tensor({k.o, k.c / k.groups, k.kh, k.kw}, seed++);
    const Tensor b = k.bias ? random_tensor({k.o}, seed++) : Tensor();
    auto inputs = [&] {
      std::vector<Tensor> in = {leaf(x.clone()), leaf(w.clone())};
      if (k.bias) in.push_back(leaf(b.clone()));
      return in;
    };
    auto fused = [&](const std::vector<Tensor>& t) {
      return conv2d_relu(t[0], t[1], k.bias ? t[2] : Tensor(), k.stride, k.padding, k.dilation,
                         k.groups);
    };
    auto composed = [&](const std::vector<Tensor>& t) {
      return relu(
          conv2d(t[0], t[1], k.bias ? t[2] : Tensor(), k.stride, k.padding, k.dilation, k.groups));
    };
    std::vector<Tensor> a = inputs(), c = inputs();
    const Tensor ya = fused(a), yc = composed(c);
    EXPECT_EQ(ya.to_vector(), yc.to_vector()) << k.what;
    const Tensor g = random_tensor(ya.shape(), seed++);
    ya.backward(g);
    yc.backward(g);
    for (size_t i = 0; i < a.size(); ++i) {
      test::expect_close(a[i].grad().to_vector(), c[i].grad().to_vector(), 1e-6, 1e-5, k.what);
    }
    float nearest = INFINITY;
    for (float v : conv2d(x, w, b, k.stride, k.padding, k.dilation, k.groups).to_vector()) {
      nearest = std::min(nearest, std::fabs(v));
    }
    // A step of 3e-3 in one input or weight (all below 1 in size) moves every
    // pre-activation by less than 3e-3.
    if (nearest > 4e-3f) {
      check_gradients(fused, inputs(), {}, std::string("conv2d_relu ") + k.what);
      ++differenced;
    }
  }
  EXPECT_GE(differenced, 2);
}

TEST(Conv2d, ABatchLargerThanOneChunkMatchesImageByImage) {
  // 40 images of 16 channels: several chunks of the unfolded batch.
  const Tensor x = random_tensor({40, 16, 12, 12}, 9);
  const Tensor w = leaf(random_tensor({8, 16, 3, 3}, 10));
  const Tensor b = leaf(random_tensor({8}, 11));
  const Tensor y = conv2d(x, w, b, 1, 1);
  y.backward(Tensor::ones(y.shape()));
  const std::vector<float> gw = w.grad().to_vector(), gb = b.grad().to_vector();
  std::vector<double> want_w(gw.size(), 0.0), want_b(gb.size(), 0.0);
  for (int64_t n = 0; n < 40; ++n) {
    Tensor wn = leaf(w.detach().clone()), bn = leaf(b.detach().clone());
    const Tensor yn = conv2d(x.slice(0, n, n + 1), wn, bn, 1, 1);
    // One image's product has fewer rows than the batch's: a BLAS may block
    // (and so round) its 144-term sums differently, a few float ulps apart.
    test::expect_close(yn.to_vector(), y.slice(0, n, n + 1).to_vector(), 1e-5, 1e-5, "image");
    yn.backward(Tensor::ones(yn.shape()));
    const auto a = wn.grad().to_vector(), c = bn.grad().to_vector();
    for (size_t i = 0; i < a.size(); ++i) want_w[i] += a[i];
    for (size_t i = 0; i < c.size(); ++i) want_b[i] += c[i];
  }
  for (size_t i = 0; i < gw.size(); ++i)
    EXPECT_NEAR(gw[i], want_w[i], 1e-3 * (1 + std::fabs(want_w[i])));
  for (size_t i = 0; i < gb.size(); ++i)
    EXPECT_NEAR(gb[i], want_b[i], 1e-3 * (1 + std::fabs(want_b[i])));
}

// conv1d of [N, C, L] is the definition with a height of 1: stride, padding,
// dilation and groups along L; its gradients match finite differences.
TEST(Conv1d, MatchesTheDefinitionAndFiniteDifferences) {
  uint64_t seed = 300;
  const std::vector<ConvCase> one_d = {
      {"k 3", 2, 3, 1, 9, 4, 1, 3, 1, 0, 1, 1, true},
      {"stride 2, padding 1, dilation 2", 2, 2, 1, 11, 3, 1, 3, {1, 2}, {0, 1}, {1, 2}, 1, true},
      {"2 groups, no bias", 1, 4, 1, 7, 6, 1, 2, 1, 0, 1, 2, false}};
  for (const ConvCase& k : one_d) {
    const Tensor x = random_tensor({k.n, k.c, k.w}, seed++);
    const Tensor w = random_tensor({k.o, k.c / k.groups, k.kw}, seed++);
    const Tensor b = random_tensor({k.o}, seed++);
    const Tensor y =
        conv1d(x, w, k.bias ? b : Tensor(), k.stride.w, k.padding.w, k.dilation.w, k.groups);
    const int64_t ow = window_output_size(k.w, k.kw, k.stride.w, k.padding.w, k.dilation.w);
    ASSERT_EQ(y.shape(), Shape({k.n, k.o, ow})) << k.what;
    test::expect_close(y.to_vector(),
                       direct_conv2d(x.to_vector(), w.to_vector(), b.to_vector(), k, 1, ow), 1e-5,
                       1e-5, k.what);
    std::vector<Tensor> in;
    in.reserve(3);
    for (const Tensor& t : {x, w, b}) in.push_back(leaf(t));
    if (!k.bias) in.pop_back();
    check_gradients(
        [&](const std::vector<Tensor>& t) {
          return conv1d(t[0], t[1], k.bias ? t[2] : Tensor(), k.stride.w, k.padding.w, k.dilation.w,
                        k.groups);
        },
        in, {}, k.what);
  }
  EXPECT_THROW(conv1d(random_tensor({2, 3, 4, 4}, 1), random_tensor({2, 3, 3}, 2)), ShapeError);
  // nn::Conv1d: PyTorch's weight shape, the op's result.
  nn::Conv1d layer(3, 5, 4, 2, 1);
  EXPECT_EQ(layer.weight().shape(), Shape({5, 3, 4}));
  const Tensor x = random_tensor({2, 3, 10}, 7);
  test::expect_close(layer.forward(x).to_vector(),
                     conv1d(x, layer.weight(), layer.bias(), 2, 1).to_vector(), 0, 0, "module");
}

namespace {

struct Conv3dCase {
  const char* what;
  int64_t n, c, d, h, w, o;
  Size3 kernel, stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// conv3d's definition, element by element, in double on the host.
std::vector<float> direct_conv3d(const std::vector<float>& x, const std::vector<float>& w,
                                 const std::vector<float>& b, const Conv3dCase& k,
                                 const Shape& out) {
  const int64_t cg = k.c / k.groups, og = k.o / k.groups;
  const int64_t od = out[2], oh = out[3], ow = out[4];
  const Size3 kk = k.kernel, s = k.stride, p = k.padding, dl = k.dilation;
  std::vector<float> y(static_cast<size_t>(out.numel()));
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t z = 0; z < od; ++z)
        for (int64_t yy = 0; yy < oh; ++yy)
          for (int64_t xx = 0; xx < ow; ++xx) {
            double acc = k.bias ? b[static_cast<size_t>(o)] : 0.0;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t a = 0; a < kk.d; ++a)
                for (int64_t i = 0; i < kk.h; ++i)
                  for (int64_t j = 0; j < kk.w; ++j) {
                    const int64_t iz = z * s.d - p.d + a * dl.d;
                    const int64_t iy = yy * s.h - p.h + i * dl.h;
                    const int64_t ix = xx * s.w - p.w + j * dl.w;
                    if (iz < 0 || iz >= k.d || iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                    const int64_t c = o / og * cg + ci;
                    acc +=
                        static_cast<double>(w[static_cast<size_t>(
                            (((o * cg + ci) * kk.d + a) * kk.h + i) * kk.w + j)]) *
                        x[static_cast<size_t>((((n * k.c + c) * k.d + iz) * k.h + iy) * k.w + ix)];
                  }
            y[static_cast<size_t>((((n * k.o + o) * od + z) * oh + yy) * ow + xx)] =
                static_cast<float>(acc);
          }
  return y;
}

}  // namespace

// conv3d of [N, C, D, H, W] volumes is its definition (strides, padding,
// dilation and groups along each of the three dimensions); its gradients
// match finite differences; a kernel of depth 1 over volumes of depth 1 is
// conv2d; nn::Conv3d has PyTorch's weight shape and initialisation bound.
TEST(Conv3d, MatchesTheDefinitionAndFiniteDifferences) {
  const std::vector<Conv3dCase> cases = {
      {"3x3x3", 2, 2, 4, 5, 4, 3, 3, 1, 0, 1, 1, true},
      {"stride 2, padding 1", 1, 2, 5, 5, 6, 2, 3, 2, 1, 1, 1, true},
      {"uneven kernel, stride, padding and dilation",
       2,
       1,
       6,
       4,
       5,
       2,
       {2, 1, 3},
       {1, 2, 1},
       {1, 0, 1},
       {2, 1, 1},
       1,
       false},
      {"2 groups", 1, 4, 3, 4, 4, 2, {2, 2, 2}, 1, {0, 1, 1}, 1, 2, true}};
  uint64_t seed = 500;
  for (const Conv3dCase& k : cases) {
    const Tensor x = random_tensor({k.n, k.c, k.d, k.h, k.w}, seed++);
    const Tensor w =
        random_tensor({k.o, k.c / k.groups, k.kernel.d, k.kernel.h, k.kernel.w}, seed++);
    const Tensor b = random_tensor({k.o}, seed++);
    const Tensor y = conv3d(x, w, k.bias ? b : Tensor(), k.stride, k.padding, k.dilation, k.groups);
    const Shape want{k.n, k.o,
                     window_output_size(k.d, k.kernel.d, k.stride.d, k.padding.d, k.dilation.d),
                     window_output_size(k.h, k.kernel.h, k.stride.h, k.padding.h, k.dilation.h),
                     window_output_size(k.w, k.kernel.w, k.stride.w, k.padding.w, k.dilation.w)};
    ASSERT_EQ(y.shape(), want) << k.what;
    test::expect_close(y.to_vector(),
                       direct_conv3d(x.to_vector(), w.to_vector(), b.to_vector(), k, want), 1e-5,
                       1e-5, k.what);
    std::vector<Tensor> in;
    for (const Tensor& t : {x, w, b}) in.push_back(leaf(t));
    if (!k.bias) in.pop_back();
    check_gradients(
        [&](const std::vector<Tensor>& t) {
          return conv3d(t[0], t[1], k.bias ? t[2] : Tensor(), k.stride, k.padding, k.dilation,
                        k.groups);
        },
        in, {}, k.what);
  }
  const Tensor x = random_tensor({2, 3, 1, 6, 5}, 1), w = random_tensor({4, 3, 1, 3, 3}, 2);
  const Tensor b = random_tensor({4}, 3);
  test::expect_close(
      conv3d(x, w, b, Size3(1, 2, 1), Size3(0, 1, 1)).to_vector(),
      conv2d(x.reshape({2, 3, 6, 5}), w.reshape({4, 3, 3, 3}), b, {2, 1}, 1).to_vector(), 1e-6,
      1e-6, "depth 1");
  EXPECT_THROW(conv3d(random_tensor({2, 3, 4, 4}, 1), random_tensor({2, 3, 3, 3}, 2)), ShapeError);
  EXPECT_THROW(conv3d(random_tensor({1, 1, 2, 4, 4}, 1), random_tensor({1, 1, 3, 3, 3}, 2)),
               ShapeError);  // a kernel deeper than the volume
  nn::Conv3d layer(3, 5, {2, 3, 3}, 1, {0, 1, 1});
  EXPECT_EQ(layer.weight().shape(), Shape({5, 3, 2, 3, 3}));
  const float bound = 1.0f / std::sqrt(3.0f * 2 * 3 * 3);
  for (float v : layer.weight().to_vector()) EXPECT_LE(std::fabs(v), bound);
  const Tensor v = random_tensor({2, 3, 4, 5, 5}, 7);
  test::expect_close(layer.forward(v).to_vector(),
                     conv3d(v, layer.weight(), layer.bias(), 1, {0, 1, 1}).to_vector(), 0, 0,
                     "module");
}
