#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_isa.hpp"
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

// The exact form on a dense grid of [-12, 12] against erf in double, and its
// gradient against the closed form: within the error of computing
// x (1 + erf(x / sqrt 2)) / 2 in float as PyTorch does (the sum 1 + erf
// cancels for negative x), stated in units of the largest value near x; the
// same bits at every instruction set's width (the host kernels).
TEST(Activation, GeluMatchesErfInDoubleAcrossTheRange) {
  std::vector<float> xs;
  for (int i = -120000; i <= 120000; ++i) xs.push_back(static_cast<float>(i) * 1e-4f);
  const Tensor x = Tensor::from_host(xs, {static_cast<int64_t>(xs.size())});
  Tensor xl = leaf(x.clone());
  const Tensor y = gelu(xl);
  y.backward(Tensor::ones(y.shape()));
  const std::vector<float> got = y.to_vector(), grad = xl.grad().to_vector();
  const double u = std::ldexp(1.0, -24);
  double worst = 0, worst_grad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    const double cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    // Units: u times |x| (the product's scale) for the value, u for the
    // gradient (cdf + x pdf is at most ~1.13).
    worst = std::max(worst, std::abs(got[i] - v * cdf) / (u * std::max(std::abs(v), 1e-3)));
    worst_grad = std::max(worst_grad, std::abs(grad[i] - (cdf + v * pdf)) / u);
  }
  EXPECT_LT(worst, 4.0);
  EXPECT_LT(worst_grad, 4.0);
  using kdp::detail::CpuIsa;
  for (CpuIsa cap : {CpuIsa::Avx2, CpuIsa::Baseline}) {
    const CpuIsa before = kdp::detail::set_cpu_isa_limit(cap);
    const std::vector<float> narrower = gelu(x).to_vector();
    kdp::detail::set_cpu_isa_limit(before);
    EXPECT_EQ(std::memcmp(narrower.data(), got.data(), got.size() * sizeof(float)), 0)
        << kdp::detail::cpu_isa_name(cap);
  }
}

// PyTorch's tanh form, against its formula in double, and apart from the
// exact form (by up to ~1e-3 near |x| = 2, so a mix-up shows).
TEST(Activation, GeluTanhFormAndItsErrors) {
  Tensor x = Tensor::from_host({-3, -2, -0.5, 0, 0.5, 2, 3}, {7});
  const auto y = gelu(x, "tanh").to_vector();
  const auto exact = gelu(x).to_vector();
  const std::vector<float> xv = x.to_vector();
  double apart = 0.0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    const double want =
        0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y[i], want, 1e-6) << "x = " << v;
    apart = std::max(apart, std::fabs(double(y[i]) - exact[i]));
  }
  EXPECT_GT(apart, 1e-4) << "the tanh form equals the exact one";
  EXPECT_THROW(gelu(x, "sigmoid"), ValueError);
  EXPECT_THROW(nn::GELU("fast"), ValueError);
  nn::GELU module("tanh");
  EXPECT_EQ(module.forward(x).to_vector(), y);
  EXPECT_EQ(std::dynamic_pointer_cast<nn::GELU>(module.clone())->approximate(), "tanh");
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
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, {}},
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

TEST(Activation, DropoutMasksAreTheDevicesDrawsFromAnyOffset) {
  // Element i of a dropout is kept when the 24-bit draw for counter offset + i
  // reaches p's threshold: checked at an odd offset and an odd length (where a
  // pair of counters straddles the ends), then the draws' statistics.
  Generator& gen = get_default_device().generator();
  const float p = 0.3f;
  const random::Stream stream(11);
  const uint32_t threshold = random::uniform_threshold(p);
  // Odd and even offsets and lengths, a single element at each parity, and a
  // length that spans several of the host threads' blocks.
  for (const auto& [offset, length] : {std::pair<uint64_t, int64_t>{7, 101},
                                       {8, 100},
                                       {8, 101},
                                       {7, 100},
                                       {3, 1},
                                       {4, 1},
                                       {5, 20001}}) {
    gen.set_state(11, offset);
    const auto y = dropout(Tensor::ones({length}), p, true).to_vector();
    EXPECT_EQ(gen.offset(), offset + static_cast<uint64_t>(length));
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y[i] != 0.0f, stream.draw24(offset + i) >= threshold)
          << "element " << i << " of " << length << " at offset " << offset;
    }
  }
  uint32_t even = 0, odd = 0;
  stream.draw24_pair(4, even, odd);
  EXPECT_EQ(even, stream.draw24(8));
  EXPECT_EQ(odd, stream.draw24(9));
  // The threshold is the first draw k with k / 2^24 >= p.
  EXPECT_EQ(random::uniform_threshold(0.0f), 0u);
  EXPECT_EQ(random::uniform_threshold(0.5f), 1u << 23);
  EXPECT_EQ(random::uniform_threshold(1.0f), 1u << 24);
  EXPECT_EQ(random::uniform_threshold(std::nextafter(0.5f, 1.0f)), (1u << 23) + 1);
  // The two halves of one hash are independent: each kept with 1 - p, both
  // with (1 - p)^2 (five standard deviations of the binomial counts).
  const int pairs = 200000;
  int both = 0, first = 0;
  for (int k = 0; k < pairs; ++k) {
    stream.draw24_pair(static_cast<uint64_t>(k), even, odd);
    first += even >= threshold;
    both += (even >= threshold) && (odd >= threshold);
  }
  const double q = 1.0 - p;
  EXPECT_NEAR(first, pairs * q, 5 * std::sqrt(pairs * q * p));
  EXPECT_NEAR(both, pairs * q * q, 5 * std::sqrt(pairs * q * q * (1 - q * q)));
}

// NaN in, NaN out, as in PyTorch and NumPy; infinities map as the function does.
// One test per activation, each fed NaN, +Inf and -Inf beside ordinary values.
namespace {
void expect_nan_kept(const char* name, const std::function<Tensor(const Tensor&)>& f) {
  const float nan = std::nanf("");
  Tensor x = Tensor::from_host({nan, -1.0f, nan, 2.0f}, {2, 2});
  const std::vector<float> y = f(x).to_vector();
  EXPECT_TRUE(std::isnan(y[0])) << name << " turned NaN into " << y[0];
  EXPECT_TRUE(std::isnan(y[2])) << name << " turned NaN into " << y[2];
  EXPECT_FALSE(std::isnan(y[1])) << name;
  EXPECT_FALSE(std::isnan(y[3])) << name;
}
}  // namespace

TEST(ActivationNaN, Relu) {
  expect_nan_kept("relu", [](const Tensor& x) { return relu(x); });
  expect_nan_kept("nn::ReLU", [](const Tensor& x) { return nn::ReLU().forward(x); });
  const float inf = INFINITY;
  EXPECT_EQ(relu(Tensor::from_host({inf, -inf, -0.0f}, {3})).to_vector(),
            (std::vector<float>{inf, 0.0f, 0.0f}));
}

TEST(ActivationNaN, LeakyRelu) {
  expect_nan_kept("leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1f); });
}

TEST(ActivationNaN, Sigmoid) {
  expect_nan_kept("sigmoid", [](const Tensor& x) { return sigmoid(x); });
}

TEST(ActivationNaN, Tanh) {
  expect_nan_kept("tanh", [](const Tensor& x) { return tanh(x); });
}

TEST(ActivationNaN, Gelu) {
  expect_nan_kept("gelu", [](const Tensor& x) { return gelu(x); });
}

TEST(ActivationNaN, SoftmaxAndLogSoftmaxMakeTheRowNaN) {
  // A NaN in a row makes every value of that row NaN (PyTorch does the same);
  // the other row is untouched.
  const float nan = std::nanf("");
  for (bool log : {false, true}) {
    Tensor x = Tensor::from_host({1.0f, nan, 3.0f, 1.0f, 2.0f, 3.0f}, {2, 3});
    const std::vector<float> y = (log ? log_softmax(x, 1) : softmax(x, 1)).to_vector();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(i)])) << log << i;
    for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isfinite(y[static_cast<size_t>(i)])) << log << i;
  }
}

TEST(ActivationNaN, FusedLinearReluKeepsNaN) {
  // Sequential runs Linear + ReLU as one fused kernel: it must agree with relu().
  const float nan = std::nanf("");
  Tensor x = Tensor::from_host({nan, 1.0f, 2.0f, 3.0f}, {2, 2});
  Tensor w = Tensor::from_host({1.0f, 0.0f, 0.0f, 1.0f}, {2, 2});
  Tensor b = Tensor::from_host({0.0f, -10.0f}, {2});
  const std::vector<float> y = linear_relu(x, w, b).to_vector();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(y[1]));  // NaN x 0 + 1 - 10 is NaN, not below 0
  EXPECT_EQ(y[2], 2.0f);
  EXPECT_EQ(y[3], 0.0f);
}

TEST(ActivationNaN, DropoutKeepsNaNWhereItDrops) {
  // PyTorch multiplies by a 0/scale mask, so a dropped NaN stays NaN.
  const float nan = std::nanf("");
  Tensor x = Tensor::full({256}, nan);
  for (float v : dropout(x, 0.5f, true).to_vector()) EXPECT_TRUE(std::isnan(v));
}

TEST(Activation, Dropout2dDropsWholeChannelsAndReplaysItsMask) {
  const float p = 0.5f;
  Tensor x = leaf(test::random_tensor({4, 8, 3, 3}, 5, 1.0f, 2.0f));  // no zero inputs
  const Tensor y = dropout2d(x, p, true);
  const std::vector<float> xv = x.to_vector(), yv = y.to_vector();
  int dropped = 0;
  for (int64_t ch = 0; ch < 32; ++ch) {
    const bool zero = yv[static_cast<size_t>(ch * 9)] == 0.0f;
    dropped += zero ? 1 : 0;
    for (int64_t j = 0; j < 9; ++j) {
      const size_t i = static_cast<size_t>(ch * 9 + j);
      // A channel is dropped whole, or kept whole and scaled by 1 / (1 - p).
      EXPECT_FLOAT_EQ(yv[i], zero ? 0.0f : xv[i] / (1.0f - p)) << ch;
    }
  }
  EXPECT_GT(dropped, 4);  // 32 draws at p = 0.5: all kept or all dropped is ~1e-9
  EXPECT_LT(dropped, 28);
  y.backward(Tensor::ones(y.shape()));
  const std::vector<float> gv = x.grad().to_vector();
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_FLOAT_EQ(gv[i], yv[i] == 0.0f ? 0.0f : 2.0f);
  EXPECT_TRUE(dropout2d(x, p, false).is_same(x));
  EXPECT_THROW(dropout2d(x.reshape({4, 72}), p, true), ShapeError);
  EXPECT_THROW(dropout2d(x, -0.1f, true), ValueError);
  // nn::Dropout2d: active in training mode only.
  nn::Dropout2d module(0.5f);
  module.eval();
  EXPECT_TRUE(module.forward(x).is_same(x));
}

// Per-sample draws: a row's mask depends on its key and the call's ordinal
// only, not on the batch it is in (reproducible training puts a sample in
// batches of different sizes at different layouts); backward replays it.
TEST(Activation, SampleDrawsGiveEachRowItsOwnMaskInAnyBatch) {
  const float p = 0.5f;
  const int64_t width = 400;
  const auto masks = [&](const std::vector<uint64_t>& keys) {
    Tensor x = leaf(Tensor::ones({static_cast<int64_t>(keys.size()), width}));
    SampleDraws draws(7, keys);
    const Tensor first = dropout(x, p, true), second = dropout(x, p, true);
    sum(first).backward();
    EXPECT_EQ(x.grad().to_vector(), first.to_vector());  // the mask times the scale
    return std::make_pair(first.to_vector(), second.to_vector());
  };
  const auto batch = masks({11, 12, 13}), alone = masks({12});
  const auto row = [&](const std::vector<float>& v, int64_t r) {
    return std::vector<float>(v.begin() + r * width, v.begin() + (r + 1) * width);
  };
  EXPECT_EQ(row(batch.first, 1), alone.first);  // key 12 in a batch of 3 or alone
  EXPECT_EQ(row(batch.second, 1), alone.second);
  EXPECT_NE(row(batch.first, 0), row(batch.first, 1));  // other keys, other masks
  EXPECT_NE(alone.first, alone.second);                 // other calls, other masks
  int kept = 0;
  for (float v : batch.first) {
    ASSERT_TRUE(v == 0.0f || v == 2.0f) << v;
    kept += v != 0.0f;
  }
  // Binomial(1200, 0.5): standard deviation 17; 5 sigma is 87.
  EXPECT_NEAR(kept, 600, 87);
  {
    SampleDraws two(7, {1, 2});
    EXPECT_THROW(dropout(Tensor::ones({3, 4}), p, true), ShapeError);
    EXPECT_THROW(dropout2d(Tensor::ones({2, 3, 3}), p, true), ShapeError);
    // dropout2d: whole channels, per row.
    const std::vector<float> y = dropout2d(Tensor::ones({2, 6, 2, 2}), p, true).to_vector();
    for (size_t ch = 0; ch < 12; ++ch) {
      for (size_t j = 1; j < 4; ++j) EXPECT_EQ(y[ch * 4 + j], y[ch * 4]) << ch;
    }
  }
  EXPECT_EQ(SampleDraws::active(), nullptr);
}

// Element j of row r keeps where the row's stream (the seed SampleDraws gives
// the row for this call) draws at least p's threshold for counter j: an odd
// row length, so that the last element is drawn without its pair.
TEST(Activation, SampleDrawsDropElementJWithTheRowStreamsDrawJ) {
  const float p = 0.3f;
  const std::vector<uint64_t> keys = {5, 9};
  const int64_t width = 37;
  std::vector<float> y;
  {
    SampleDraws draws(3, keys);
    y = dropout(Tensor::ones({2, width}), p, true).to_vector();
  }
  SampleDraws again(3, keys);
  const std::vector<uint64_t> seeds = again.next_call();
  const uint32_t threshold = random::uniform_threshold(p);
  for (int64_t r = 0; r < 2; ++r) {
    const random::Stream stream(seeds[size_t(r)]);
    for (int64_t j = 0; j < width; ++j) {
      const float want = stream.at_least(uint64_t(j), threshold) ? 1.0f / (1.0f - p) : 0.0f;
      ASSERT_EQ(y[size_t(r * width + j)], want) << "row " << r << " element " << j;
    }
  }
}
