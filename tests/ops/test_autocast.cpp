// Products under autocast(bf16): each equals the fp32 product of its operands
// rounded to bf16 (products accumulate in fp32), forward and backward, on
// whichever path the build and KDP_CONV_PATH choose. The fp32 products are
// checked against their definitions and finite differences elsewhere; what is
// left between the two is the order of fp32 additions, a few ulps of the sums
// (tolerance 2e-5 of the largest magnitude, well below bf16's relative rounding
// of up to 2^-8, which a product in fp32 of unrounded inputs would show).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "kernels/native/bf16.hpp"
#include "test_util.hpp"

using namespace kdp;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

Tensor rounded(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  for (float& x : v) x = detail::round_to_bf16(x);
  return Tensor::from_host(v, t.shape(), t.device());
}

// |a - b| <= tol max|b| element-wise; and, to show the check can tell, the
// unrounded fp32 result differs from `b` by more than that somewhere.
void expect_matches(const Tensor& a, const Tensor& b, const std::string& what,
                    const Tensor& unrounded = Tensor()) {
  const std::vector<float> av = a.to_vector(), bv = b.to_vector();
  ASSERT_EQ(av.size(), bv.size()) << what;
  double scale = 0.0;
  for (float v : bv) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  const double tol = 2e-5 * scale;
  for (size_t i = 0; i < av.size(); ++i) {
    ASSERT_NEAR(av[i], bv[i], tol) << what << " element " << i;
  }
  if (unrounded.defined()) {
    const std::vector<float> uv = unrounded.to_vector();
    double worst = 0.0;
    for (size_t i = 0; i < uv.size(); ++i)
      worst = std::max(worst, std::fabs(double(uv[i]) - bv[i]));
    EXPECT_GT(worst, tol) << what << ": fp32 of unrounded operands is as close: the check is blind";
  }
}

}  // namespace

TEST(Autocast, LinearIsTheFp32ProductOfRoundedOperands) {
  const Tensor x = leaf(random_tensor({33, 70}, 1)), w = leaf(random_tensor({19, 70}, 2));
  const Tensor b = leaf(random_tensor({19}, 3)), gy = random_tensor({33, 19}, 4);
  Tensor y;
  {
    autocast mixed(Precision::bf16);
    y = linear(x, w, b);
  }
  y.backward(gy);
  const Tensor xr = leaf(rounded(x)), wr = leaf(rounded(w)), br = leaf(b.detach().clone());
  const Tensor yr = linear(xr, wr, br);
  yr.backward(rounded(gy));
  expect_matches(y, yr, "linear forward", linear(x.detach(), w.detach(), b.detach()));
  expect_matches(x.grad(), xr.grad(), "linear input gradient");
  expect_matches(w.grad(), wr.grad(), "linear weight gradient");
  // The bias gradient is a reduction: fp32, of the unrounded output gradient.
  expect_matches(b.grad(), sum(gy, 0), "linear bias gradient");
}

TEST(Autocast, MatmulAndTheFusedLinearRelu) {
  const Tensor a = leaf(random_tensor({17, 40}, 5)), m = leaf(random_tensor({40, 23}, 6));
  const Tensor g = random_tensor({17, 23}, 7);
  Tensor out;
  {
    autocast mixed(Precision::bf16);
    out = matmul(a, m);
  }
  out.backward(g);
  const Tensor ar = leaf(rounded(a)), mr = leaf(rounded(m));
  matmul(ar, mr).backward(rounded(g));
  expect_matches(out, matmul(ar.detach(), mr.detach()), "matmul forward");
  expect_matches(a.grad(), ar.grad(), "matmul gradient of a");
  expect_matches(m.grad(), mr.grad(), "matmul gradient of b");

  const Tensor x = random_tensor({9, 40}, 8), w = random_tensor({12, 40}, 9);
  Tensor y;
  {
    autocast mixed(Precision::bf16);
    y = linear_relu(x, w, Tensor());
  }
  expect_matches(y, linear_relu(rounded(x), rounded(w), Tensor()), "linear_relu forward");
}

TEST(Autocast, ConvolutionIsTheFp32ConvolutionOfRoundedOperands) {
  struct Case {
    const char* what;
    Shape x, w;
    Size2 stride, padding;
    bool relu;
  };
  for (const Case& k : {Case{"E conv2-like", {3, 8, 10, 10}, {6, 8, 3, 3}, 1, 0, true},
                        Case{"padded, strided", {2, 3, 9, 8}, {5, 3, 3, 3}, 2, 1, false},
                        Case{"5x5 on one channel", {4, 1, 12, 12}, {4, 1, 5, 5}, 1, 0, false}}) {
    const Tensor x = leaf(random_tensor(k.x, 11)), w = leaf(random_tensor(k.w, 12));
    const Tensor b = leaf(random_tensor({k.w[0]}, 13));
    Tensor y;
    {
      autocast mixed(Precision::bf16);
      y = k.relu ? conv2d_relu(x, w, b, k.stride, k.padding) : conv2d(x, w, b, k.stride, k.padding);
    }
    const Tensor gy = random_tensor(y.shape(), 14);
    y.backward(gy);
    const Tensor xr = leaf(rounded(x)), wr = leaf(rounded(w)), br = leaf(b.detach().clone());
    const Tensor yr = k.relu ? conv2d_relu(xr, wr, br, k.stride, k.padding)
                             : conv2d(xr, wr, br, k.stride, k.padding);
    yr.backward(rounded(gy));
    const std::string what = k.what;
    expect_matches(y, yr, what + " forward",
                   conv2d(x.detach(), w.detach(), b.detach(), k.stride, k.padding));
    expect_matches(x.grad(), xr.grad(), what + " input gradient");
    expect_matches(w.grad(), wr.grad(), what + " weight gradient");
    // The bias gradient: an fp32 sum of the (masked) unrounded output gradient.
    const Tensor mask = k.relu ? Tensor::from_host(
                                     [&] {
                                       std::vector<float> m = yr.to_vector();
                                       for (float& v : m) v = v > 0.0f ? 1.0f : 0.0f;
                                       return m;
                                     }(),
                                     y.shape())
                               : Tensor::ones(y.shape());
    expect_matches(b.grad(), sum(sum(sum(gy * mask, 3), 2), 0), what + " bias gradient");
  }
}

// PyTorch's fp32 list: reductions, softmax and log_softmax, losses,
// BatchNorm (its statistics and normalization), pooling and elementwise ops
// compute under autocast(bf16) exactly as outside it, forward and backward,
// to the bit; so does an optimizer step on fp32 master weights.
TEST(Autocast, TheFp32OpsAreUntouched) {
  const Tensor labels = Tensor::from_host({0, 2, 1, 2, 0, 1}, {6});
  const auto run = [&](bool inside) {
    const Tensor x = leaf(random_tensor({6, 3, 4, 4}, 21));
    const Tensor gamma = leaf(random_tensor({3}, 22, 0.5f, 1.5f));
    const Tensor beta = leaf(random_tensor({3}, 23));
    std::optional<autocast> mixed;
    if (inside) mixed.emplace(Precision::bf16);
    const Tensor h = max_pool2d(batch_norm_relu(x, {}, {}, gamma, beta, true), 2);
    const Tensor flat = h.reshape({6, 12});
    const Tensor logits = sum(flat.reshape({6, 3, 4}), 2);
    const Tensor loss = cross_entropy(logits, labels) + mean(log_softmax(logits, 1)) * 0.1f +
                        sum(softmax(logits, 1) * logits) * 0.01f +
                        mse_loss(flat, Tensor::zeros(flat.shape())) +
                        mean(square(flat) + exp(-flat));
    mixed.reset();
    loss.backward();
    std::vector<std::vector<float>> out = {loss.detach().to_vector(), x.grad().to_vector(),
                                           gamma.grad().to_vector(), beta.grad().to_vector()};
    optim::SGD opt({{"gamma", gamma}}, optim::SGDOptions{0.1, 0.9});
    opt.step();
    out.push_back(gamma.to_vector());
    return out;
  };
  const auto outside = run(false), inside = run(true);
  ASSERT_EQ(outside.size(), inside.size());
  for (size_t i = 0; i < outside.size(); ++i) {
    EXPECT_EQ(inside[i], outside[i]) << "result " << i << " changed under autocast";
  }
}
