#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;

namespace {

using MyModel = test::ExplainerModel;

// The explainer's custom loss, written from ops: its gradient comes from autograd.
class MyLoss : public nn::Loss {
 public:
  MyLoss() : Loss("MyLoss") {}
  Tensor forward(const Tensor& output, const Tensor& target) override {
    return mean(square(output - target));
  }
  using Loss::forward;
};

float train_step(nn::Module& model, const nn::LossFunction& loss_fn, optim::Optimizer& opt,
                 const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = loss_fn(model.forward(x), y);
  loss.backward();
  opt.step();
  return loss.item();
}

}  // namespace

TEST(Training, TwoLayerMlpFitsATeacherNetwork) {
  manual_seed(7);
  // Targets from a fixed random teacher: a task an MLP can represent exactly.
  auto teacher = nn::mlp({4, 16, 2}, "tanh");
  Tensor x = test::random_tensor({128, 4}, 11, -2.0f, 2.0f);
  Tensor y;
  {
    NoGradGuard guard;
    y = teacher->forward(x).detach();
  }
  auto student = nn::mlp({4, 32, 2}, "tanh");
  optim::AdamOptions o;
  o.lr = 1e-2;
  optim::Adam opt(student->named_parameters(), o);
  nn::MSELoss mse;
  const float first = train_step(*student, std::ref(mse), opt, x, y);
  float last = first;
  for (int step = 0; step < 400; ++step) last = train_step(*student, std::ref(mse), opt, x, y);
  EXPECT_LT(last, first / 10.0f) << "first " << first << " last " << last;
}

TEST(Training, ExplainersModelTrainsWithACustomLoss) {
  manual_seed(3);
  auto model = std::make_shared<MyModel>();
  Tensor x = Tensor::randn({100, 10});
  Tensor target = Tensor::randn({100, 10});

  // The custom loss agrees with the built-in MSE in value and gradient.
  MyLoss custom;
  nn::MSELoss builtin;
  custom(model->forward(x), target).backward();
  const auto g_custom = model->fc1->weight().grad().to_vector();
  model->zero_grad();
  builtin(model->forward(x), target).backward();
  test::expect_close(g_custom, model->fc1->weight().grad().to_vector(), 1e-6, 1e-4, "gradients");
  EXPECT_NEAR(custom(model->forward(x), target).item(), builtin(model->forward(x), target).item(),
              1e-6);

  optim::SGDOptions so;
  so.lr = 0.05;
  so.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), so);
  const float first = train_step(*model, std::ref(custom), opt, x, target);
  float last = first;
  for (int step = 0; step < 300; ++step)
    last = train_step(*model, std::ref(custom), opt, x, target);
  // Random targets: the 2110 parameters can fit a good part of the 1000 numbers.
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
}

TEST(Training, SteadyStateStepMakesNoNewAllocation) {
  auto model = nn::mlp({20, 64, 64, 5});
  optim::SGDOptions so;
  so.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), so);
  Tensor x = test::random_tensor({32, 20}, 1);
  Tensor y = Tensor::from_host(std::vector<float>(32, 3.0f), {32});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
  };
  step();
  step();  // warm-up: the cache and the momentum buffers are filled
  const AllocatorStats before = Runtime::get().allocator().stats();
  for (int i = 0; i < 3; ++i) step();
  const AllocatorStats after = Runtime::get().allocator().stats();
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.dedicated_allocations, before.dedicated_allocations);
  EXPECT_GT(after.cache_hits, before.cache_hits);  // the steps did allocate, from the cache
}

TEST(Training, AStepCopiesNothingToTheHost) {
  // Forward, loss, backward, clipping, the anomaly count and the optimizer step
  // all stay in device memory: on a GPU nothing waits for a copy. Counted on
  // every backend (on host ones the same reads would be plain loads).
  auto model = nn::mlp({20, 64, 5});
  optim::Adam opt(model->named_parameters(), optim::AdamOptions{});
  Tensor x = test::random_tensor({32, 20}, 1);
  Tensor y = Tensor::from_host(std::vector<float>(32, 3.0f), {32});
  std::vector<Tensor> params;
  for (auto& [name, p] : model->named_parameters()) params.push_back(p);
  Tensor loss_sum = Tensor::zeros({}), correct = Tensor::zeros({});
  const TransferCounts before = Runtime::get().transfers();
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    Tensor out = model->forward(x);
    Tensor loss = cross_entropy(out, y);
    loss.backward();
    Tensor bad = nn::non_finite_grad_count(params);
    Tensor norm = nn::clip_grad_norm(params, 1.0);
    opt.step();
    loss_sum.add_(loss.detach(), 32.0f);
    correct.add_(count_correct(out.detach(), y));
  }
  const TransferCounts after = Runtime::get().transfers();
  EXPECT_EQ(after.to_host, before.to_host);
  EXPECT_EQ(after.to_device, before.to_device);
  // Reading a figure is one counted copy.
  EXPECT_GT(loss_sum.item(), 0.0f);
  EXPECT_EQ(Runtime::get().transfers().to_host, after.to_host + 1);
}

TEST(Training, ClipGradNormMatchesTheClosedForm) {
  Tensor a = Tensor::from_host({3, 4}, {2}).requires_grad_();
  Tensor b = Tensor::from_host({0, 12}, {2}).requires_grad_();
  Tensor c = Tensor::zeros({2}).requires_grad_();  // no gradient: skipped
  sum(a * a * 0.5f + b * b * 0.5f).backward();     // grads are a and b
  // |(3, 4, 0, 12)| = 13; clipped to 6.5 the gradients halve (up to the 1e-6).
  Tensor norm = nn::clip_grad_norm({a, b, c}, 6.5);
  EXPECT_FLOAT_EQ(norm.item(), 13.0f);
  const float k = 6.5f / (13.0f + 1e-6f);
  test::expect_close(a.grad().to_vector(), {3 * k, 4 * k}, 1e-6, 1e-6);
  test::expect_close(b.grad().to_vector(), {0, 12 * k}, 1e-6, 1e-6);
  // Below the limit nothing changes.
  EXPECT_FLOAT_EQ(nn::clip_grad_norm({a, b}, 100.0).item(), 6.5f);
  test::expect_close(a.grad().to_vector(), {3 * k, 4 * k}, 1e-6, 1e-6);
  // Non-finite values are counted, whatever their sign.
  b.grad().copy_(Tensor::from_host({std::nanf(""), -INFINITY}, {2}));
  EXPECT_EQ(nn::non_finite_grad_count({a, b, c}).item(), 2.0f);
  EXPECT_THROW(nn::clip_grad_norm({a}, 0.0), ValueError);
}
