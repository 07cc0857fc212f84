#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::leaf;

TEST(Autograd, ChainRuleOnAClosedForm) {
  // L = sum(a * b + a) => dL/da = b + 1, dL/db = a
  Tensor a = leaf(Tensor::from_host({1, 2, 3}, {3}));
  Tensor b = leaf(Tensor::from_host({4, 5, 6}, {3}));
  Tensor loss = sum(a * b + a);
  EXPECT_FLOAT_EQ(loss.item(), 4 + 10 + 18 + 6);
  loss.backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{1, 2, 3}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor a = leaf(Tensor::from_host({1, 2}, {2}));
  sum(a * 3.0f).backward();
  sum(a * 3.0f).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{6, 6}));
}

TEST(Autograd, DiamondSumsBothPaths) {
  // y = x^2 + 3x; dy/dx = 2x + 3
  Tensor x = leaf(Tensor::from_host({2, -1}, {2}));
  Tensor y = square(x) + x * 3.0f;
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{7, 1}));
}

TEST(Autograd, SameTensorTwiceInOneOp) {
  Tensor x = leaf(Tensor::from_host({3}, {1}));
  sum(x * x).backward();  // d(x^2)/dx = 2x
  EXPECT_FLOAT_EQ(x.grad().item(), 6.0f);
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = leaf(Tensor::from_host({1, 2}, {2}));
  Tensor loss = sum(square(x));
  loss.backward();
  EXPECT_THROW(loss.backward(), StateError);

  Tensor y = leaf(Tensor::from_host({1, 2}, {2}));
  Tensor loss2 = sum(square(y));
  loss2.backward(Tensor(), /*retain_graph=*/true);
  loss2.backward();
  EXPECT_EQ(y.grad().to_vector(), (std::vector<float>{4, 8}));
}

TEST(Autograd, NonScalarOutputNeedsAGradient) {
  Tensor x = leaf(Tensor::ones({2, 3}));
  Tensor y = x * 2.0f;
  try {
    y.backward();
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  y.backward(Tensor::ones({2, 3}));
  EXPECT_EQ(x.grad().to_vector(), std::vector<float>(6, 2.0f));
  EXPECT_THROW(y.backward(Tensor::ones({3, 2})), ShapeError);
}

TEST(Autograd, OutputWithoutHistoryIsAnError) {
  Tensor x = Tensor::ones({2});
  EXPECT_THROW(sum(x).backward(), StateError);
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = leaf(Tensor::ones({2}));
  {
    NoGradGuard guard;
    Tensor y = x * 2.0f;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  Tensor z = x * 2.0f;
  EXPECT_TRUE(z.requires_grad());
}

TEST(Autograd, DetachStopsTheGradient) {
  Tensor x = leaf(Tensor::from_host({2}, {1}));
  Tensor y = x * x.detach();  // only the first factor carries a gradient
  sum(y).backward();
  EXPECT_FLOAT_EQ(x.grad().item(), 2.0f);
}

TEST(Autograd, InPlaceChangeOfASavedTensorIsReported) {
  Tensor w = leaf(Tensor::from_host({1, 2}, {2}));
  Tensor x = leaf(Tensor::from_host({3, 4}, {2}));
  Tensor loss = sum(w * x);
  {
    NoGradGuard guard;
    w.add_(Tensor::ones({2}));  // like an optimizer step between forward and backward
  }
  try {
    loss.backward();
    FAIL() << "expected StateError";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
  }
}

TEST(Autograd, GradReadyHookFiresOnceWithTheFinalGradient) {
  Tensor x = leaf(Tensor::from_host({1, 2}, {2}));
  int calls = 0;
  std::vector<float> seen;
  x.add_grad_ready_hook([&](Tensor& g) {
    ++calls;
    seen = g.to_vector();
  });
  // x feeds three paths; the hook must see the sum of all of them.
  Tensor loss = sum(x * 2.0f) + sum(x * 3.0f) + sum(square(x));
  loss.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<float>{7, 9}));
}

TEST(Autograd, HooksFireInReverseLayerOrderAndCanBeRemoved) {
  Tensor w1 = leaf(test::random_tensor({4, 3}, 1));
  Tensor w2 = leaf(test::random_tensor({2, 4}, 2));
  std::vector<int> order;
  const uint64_t h1 = w1.add_grad_ready_hook([&](Tensor&) { order.push_back(1); });
  w2.add_grad_ready_hook([&](Tensor&) { order.push_back(2); });
  Tensor x = test::random_tensor({5, 3}, 3);
  sum(linear(relu(linear(x, w1)), w2)).backward();
  EXPECT_EQ(order, (std::vector<int>{2, 1}));  // the later layer's gradient is final first
  w1.remove_grad_ready_hook(h1);
  order.clear();
  sum(linear(relu(linear(x, w1)), w2)).backward();
  EXPECT_EQ(order, (std::vector<int>{2}));
}

namespace {

// An identity op whose backward notes that it ran.
class Probe : public autograd::Node {
 public:
  Probe(const Tensor& x, std::vector<std::string>& events) : Node(x.device()), events_(events) {
    set_next_edges({&x});
  }
  const char* name() const override { return "probe"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    events_.push_back("probe");
    return {grads[0]};
  }

 private:
  std::vector<std::string>& events_;
};

Tensor probe(const Tensor& x, std::vector<std::string>& events) {
  Tensor out = x.detach();
  autograd::set_history(out, std::make_shared<Probe>(x, events));
  return out;
}

}  // namespace

// A parameter's gradient is final as soon as its layer's backward has run, at
// every step: its accumulator, made at the first step and kept, runs before
// the ops below the layer (here the probe), not after all of them.
TEST(Autograd, ALayersGradientIsFinalBeforeTheLayersBelowRunAtEveryStep) {
  Tensor w1 = leaf(test::random_tensor({4, 3}, 1));
  Tensor w2 = leaf(test::random_tensor({2, 4}, 2));
  std::vector<std::string> events;
  w1.add_grad_ready_hook([&](Tensor&) { events.push_back("w1"); });
  w2.add_grad_ready_hook([&](Tensor&) { events.push_back("w2"); });
  Tensor x = test::random_tensor({5, 3}, 3);
  for (int step = 0; step < 3; ++step) {
    events.clear();
    sum(linear(probe(relu(linear(x, w1)), events), w2)).backward();
    EXPECT_EQ(events, (std::vector<std::string>{"w2", "probe", "w1"})) << "step " << step;
  }
}

TEST(Autograd, BackwardWithSeveralOutputs) {
  Tensor x = leaf(Tensor::from_host({1, 2}, {2}));
  Tensor a = sum(x * 2.0f);
  Tensor b = sum(x * 5.0f);
  backward({a, b});
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{7, 7}));
}
