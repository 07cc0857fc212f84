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
