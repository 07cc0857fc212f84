// Reproducible mode's one pass over a rank's shards: which models it takes,
// and that each shard's row of the exact sum holds that shard's own gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "kdp/nn/activation.hpp"
#include "kdp/nn/conv.hpp"
#include "kdp/nn/linear.hpp"
#include "kdp/nn/sequential.hpp"
#include "kdp/ops/loss.hpp"
#include "kdp/ops/reduction.hpp"
#include "test_util.hpp"
#include "train/shard_pass.hpp"

using namespace kdp;
using kdp::train::detail::ExactGradient;
using kdp::train::detail::one_pass_parameters;
using kdp::train::detail::ShardSlots;

namespace {

std::shared_ptr<nn::Sequential> mlp() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(6, 7));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(7, 3));
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

TEST(ShardPass, EachShardsRowIsThatShardsOwnGradient) {
  auto model = mlp();
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
    shard_loss(model->forward(x.slice(0, starts[t], starts[t + 1])),
               y.slice(0, starts[t], starts[t + 1]))
        .backward();
    want.emplace_back();
    for (const auto& [name, p] : params) want.back().push_back(p.grad().to_vector());
  }
  for (auto [name, p] : params) p.set_grad(Tensor());

  // One pass: the rows together, each shard's loss on its own rows.
  exact.begin_shards(3);
  {
    ShardSlots slots(starts, exact, index);
    const Tensor out = model->forward(x);
    Tensor loss;
    for (size_t t = 0; t + 1 < starts.size(); ++t) {
      const Tensor l =
          shard_loss(out.slice(0, starts[t], starts[t + 1]), y.slice(0, starts[t], starts[t + 1]));
      loss = loss.defined() ? loss + l : l;
    }
    loss.backward();
    EXPECT_TRUE(slots.all_written());
  }
  for (const auto& [name, p] : params) {
    EXPECT_FALSE(p.grad().defined()) << name << ": summed over the batch as well";
  }
  for (int t = 0; t < 3; ++t) {
    for (size_t i = 0; i < params.size(); ++i) {
      const float* row = exact.slot(i, t);
      const std::vector<float>& w = want[static_cast<size_t>(t)][i];
      for (size_t e = 0; e < w.size(); ++e) {
        ASSERT_NEAR(row[e], w[e], 1e-5 * (1.0 + std::fabs(w[e])))
            << "shard " << t << ", " << params[i].first << "[" << e << "]";
      }
    }
  }
  // And their exact sum is the whole batch's gradient.
  exact.end_shards(3);
  exact.reduce(12);
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> got = params[i].second.grad().to_vector();
    for (size_t e = 0; e < got.size(); ++e) {
      const double sum = double{want[0][i][e]} + want[1][i][e] + want[2][i][e];
      ASSERT_NEAR(got[e], sum, 1e-5 * (1.0 + std::fabs(sum))) << params[i].first << "[" << e << "]";
    }
  }
}
