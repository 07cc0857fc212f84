// Reproducible mode's one pass over a rank's shards: which models it takes,
// and that each gradient is the product over all the shards' rows in the
// order of their ids, the same bits however the shards are grouped into
// passes and in whatever order the passes come.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>

#include "exact/shard_pass.hpp"
#include "exact/shard_products.hpp"
#include "kdp/nn/activation.hpp"
#include "kdp/nn/conv.hpp"
#include "kdp/nn/linear.hpp"
#include "kdp/nn/sequential.hpp"
#include "kdp/ops/loss.hpp"
#include "kdp/ops/reduction.hpp"
#include "kernels/native/bf16.hpp"
#include "test_util.hpp"

using namespace kdp;
using kdp::exact::ExactGradient;
using kdp::exact::one_pass_parameters;
using kdp::exact::ShardSlots;

namespace {

std::shared_ptr<nn::Sequential> mlp(bool last_bias = true) {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(6, 7));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(7, 3, last_bias));
  return m;
}

// A loss of one shard's output rows.
Tensor shard_loss(const Tensor& out, const Tensor& target) {
  return mse_loss(out, target, Reduction::Sum);
}

}  // namespace

TEST(ShardPass, TakesModelsThatKeepEverySamplesRowApart) {
  auto model = mlp();
  const optim::NamedParameters params = model->named_parameters();
  EXPECT_EQ(one_pass_parameters(*model, params, 3).size(), 4u);  // [N, 2, 3]: flattened
  EXPECT_EQ(one_pass_parameters(*model, params, 2).size(), 4u);

  // A parameter the optimizer does not hold, or one it holds that no linear
  // layer owns: the shards go one by one.
  const optim::NamedParameters fewer(params.begin(), params.end() - 1);
  EXPECT_TRUE(one_pass_parameters(*model, fewer, 2).empty());
  optim::NamedParameters more = params;
  more.emplace_back("extra", Tensor::zeros({3}));
  EXPECT_TRUE(one_pass_parameters(*model, more, 2).empty());

  // A linear layer on 3-D input (its rows are not samples), a convolution, a
  // layer shared twice.
  auto flat_last = std::make_shared<nn::Sequential>();
  flat_last->push_back(std::make_shared<nn::Linear>(3, 2));
  flat_last->push_back(std::make_shared<nn::Flatten>());
  EXPECT_TRUE(one_pass_parameters(*flat_last, flat_last->named_parameters(), 3).empty());
  auto conv = std::make_shared<nn::Sequential>();
  conv->push_back(std::make_shared<nn::Conv2d>(1, 2, 3));
  EXPECT_TRUE(one_pass_parameters(*conv, conv->named_parameters(), 4).empty());
  auto shared = std::make_shared<nn::Linear>(4, 4);
  auto tied = std::make_shared<nn::Sequential>();
  tied->push_back(shared);
  tied->push_back(std::make_shared<nn::ReLU>());
  tied->push_back(shared);
  EXPECT_TRUE(one_pass_parameters(*tied, tied->named_parameters(), 2).empty());
}

namespace {

// One pass over rows [starts.front(), starts.back()) of x, y as shards that
// start at `starts`, numbered `ids`: each shard's loss on its own rows; every
// parameter's products handed to `exact`, none summed into .grad.
void one_pass(nn::Module& model, const optim::NamedParameters& params, ExactGradient& exact,
              const std::map<const TensorImpl*, size_t>& index, const Tensor& x, const Tensor& y,
              std::vector<int64_t> starts, std::vector<int> ids, Precision precision) {
  const int64_t first = starts.front();
  for (int64_t& s : starts) s -= first;
  ShardSlots slots(starts, std::move(ids), exact, index);
  Tensor out;
  {
    autocast mixed(precision);
    out = model.forward(x.slice(0, first, first + starts.back()));
  }
  Tensor loss;
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    const Tensor l = shard_loss(out.slice(0, starts[t], starts[t + 1]),
                                y.slice(0, first + starts[t], first + starts[t + 1]));
    loss = loss.defined() ? loss + l : l;
  }
  loss.backward();
  EXPECT_TRUE(slots.all_written());
  for (const auto& [name, p] : params) {
    EXPECT_FALSE(p.grad().defined()) << name << ": summed over the batch as well";
  }
}

std::vector<std::vector<float>> gradients(const optim::NamedParameters& params) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, p] : params) out.push_back(p.grad().to_vector());
  return out;
}

// The one pass's products (row_gemm, row_gemm_bf16) for a forward alone.
class RowProducts : public exact::ShardProducts {
 public:
  using ShardProducts::ShardProducts;
  bool take_linear_gradients(const TensorImpl*, const TensorImpl*, const Tensor&, const Tensor&,
                             Precision) override {
    return false;
  }
};

float flushed(float v) {
  return std::fabs(v) < FLT_MIN ? std::copysign(0.0f, v) : v;
}

// The one pass's gradients against each shard alone and, for the last layer,
// against the chain over the rows in the shards' order (the test below): in
// fp32 row_gemm's fused multiply-adds, in bf16 row_gemm_bf16's pairs of them
// on the rounded operands.
void check_one_pass(const std::shared_ptr<nn::Sequential>& model, Precision precision) {
  const bool bf16 = precision == Precision::bf16;
  const optim::NamedParameters params = model->named_parameters();
  const auto index = one_pass_parameters(*model, params, 3);
  ASSERT_FALSE(index.empty());
  dist::Communicator comm = dist::Communicator::world();
  ExactGradient exact(params, comm, get_default_device());
  const std::vector<int64_t> starts{0, 3, 4, 9};
  const Tensor x = test::random_tensor({9, 2, 3}, 21), y = test::random_tensor({9, 3}, 22);

  // Every shard alone through the model, as the shards go one by one.
  std::vector<std::vector<std::vector<float>>> want;  // [shard][param]
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    for (auto [name, p] : params) p.set_grad(Tensor());
    Tensor out;
    {
      autocast mixed(precision);
      out = model->forward(x.slice(0, starts[t], starts[t + 1]));
    }
    shard_loss(out, y.slice(0, starts[t], starts[t + 1])).backward();
    want.push_back(gradients(params));
  }
  for (auto [name, p] : params) p.set_grad(Tensor());

  // One pass: the rows together. Its gradient is the whole batch's.
  one_pass(*model, params, exact, index, x, y, starts, {0, 1, 2}, precision);
  exact.reduce(12);
  const std::vector<std::vector<float>> together = gradients(params);
  // Alone, a shard's bf16 products are the vendor's, whose sums may round
  // an activation to the next bf16 value.
  const double tolerance = bf16 ? 2e-2 : 1e-5;
  for (size_t i = 0; i < params.size(); ++i) {
    for (size_t e = 0; e < together[i].size(); ++e) {
      const double sum = double{want[0][i][e]} + want[1][i][e] + want[2][i][e];
      ASSERT_NEAR(together[i][e], sum, tolerance * (1.0 + std::fabs(sum)))
          << params[i].first << "[" << e << "]";
    }
  }
  // The last layer's weight: each element the chain of fused multiply-adds
  // of dy (mse's 2 (out - y)) times its input h over rows 0..8, in order
  // from zero; its bias: dy's column summed in that order.
  {
    NoGradGuard no_grad;
    RowProducts rows({0, 9});  // the pass's products, row by row
    autocast mixed(precision);
    const Tensor h = (*model)[2]->forward((*model)[1]->forward((*model)[0]->forward(x)));
    const Tensor out = (*model)[3]->forward(h);
    const std::vector<float> hv = h.to_vector(), ov = out.to_vector(), yv = y.to_vector();
    const auto operand = [&](float v) { return bf16 ? kdp::detail::round_to_bf16(v) : v; };
    const size_t w = params.size() - (together.size() == 4 ? 2 : 1);
    for (int64_t i = 0; i < 3; ++i) {
      float bias = 0.0f;
      for (int64_t j = 0; j < 7; ++j) {
        const auto dy = [&](int64_t r) {
          return 2.0f * (ov[static_cast<size_t>(r * 3 + i)] - yv[static_cast<size_t>(r * 3 + i)]);
        };
        const auto term = [&](int64_t r) {
          return std::pair{operand(dy(r)), operand(hv[static_cast<size_t>(r * 7 + j)])};
        };
        float acc = 0.0f;
        if (!bf16) {
          for (int64_t r = 0; r < 9; ++r) acc = std::fma(term(r).first, term(r).second, acc);
        } else {
          for (int64_t r = 0; r < 9; r += 2) {  // pairs, the odd row first; the 10th is zero
            const auto [dy1, h1] = r + 1 < 9 ? term(r + 1) : std::pair{0.0f, 0.0f};
            acc = flushed(std::fma(dy1, h1, acc));
            acc = flushed(std::fma(term(r).first, term(r).second, acc));
          }
        }
        for (int64_t r = 0; r < 9 && j == 0; ++r) bias += dy(r);
        EXPECT_EQ(together[w][static_cast<size_t>(i * 7 + j)], acc)
            << "weight [" << i << ", " << j << "]";
      }
      if (together.size() == 4) {
        EXPECT_EQ(together[3][static_cast<size_t>(i)], bias) << "bias " << i;
      }
    }
  }

  // Each shard in a pass of its own, in another order (as another layout
  // would hold them): the same bits, so the products went over the rows in
  // the shards' order, whichever pass brought them.
  for (auto [name, p] : params) p.set_grad(Tensor());
  for (const size_t t : {2u, 0u, 1u}) {
    one_pass(*model, params, exact, index, x, y, {starts[t], starts[t + 1]}, {static_cast<int>(t)},
             precision);
  }
  exact.reduce(12);
  const std::vector<std::vector<float>> apart = gradients(params);
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(apart[i].data(), together[i].data(), apart[i].size() * sizeof(float)))
        << params[i].first;
  }
}

}  // namespace

TEST(ShardPass, MakesEachGradientOverTheShardsRowsInTheirOrder) {
  check_one_pass(mlp(), Precision::fp32);
  // A linear layer without a bias hands over its weight's products alone.
  check_one_pass(mlp(false), Precision::fp32);
}

TEST(ShardPass, MakesBf16GradientsAsPairsOverTheShardsRowsInTheirOrder) {
  check_one_pass(mlp(), Precision::bf16);
  check_one_pass(mlp(false), Precision::bf16);
}
