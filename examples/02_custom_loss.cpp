// A model trained with a loss written by the user from kdp ops.
//
// The model and the loss are those of the PyTorch article this library follows
// (10 -> 100 -> ReLU -> 10, loss mean((output - target)^2)), with its mistakes
// put right: the batch is kept (no view(-1), which would flatten 100 samples into
// one vector), and the optimizer is defined and used: zero_grad, backward, step.
// As in the article, the model is wrapped in DataParallel (over every available
// device; pass a device count to choose).
//
//   02_custom_loss [devices]
#include <cstdio>
#include <cstdlib>

#include "kdp/kdp.hpp"

using namespace kdp;

// The model: two Linear layers with a ReLU between them.
class MyModel : public nn::Module {
 public:
  MyModel() : Module("MyModel") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(10, 100));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(100, 10));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
  using Module::forward;

 private:
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// The custom loss: any function of ops; autograd supplies its gradient.
class MyLoss : public nn::Loss {
 public:
  MyLoss() : Loss("MyLoss") {}
  Tensor forward(const Tensor& output, const Tensor& target) override {
    return mean(square(output - target));
  }
  using Loss::forward;
};

int main(int argc, char** argv) {
  try {
    Runtime runtime(argc, argv);
    manual_seed(0);
    const std::vector<Device> devs = devices(argc > 1 ? std::atoi(argv[1]) : device_count());
    auto model = std::make_shared<DataParallel>(std::make_shared<MyModel>(), devs);
    MyLoss criterion;
    optim::SGD optimizer(model->named_parameters(), optim::SGDOptions{0.05, 0.9});

    Tensor input = Tensor::randn({100, 10}, devs[0]);  // a batch of 100 samples
    Tensor target = Tensor::randn({100, 10}, devs[0]);

    for (int step = 0; step <= 200; ++step) {
      optimizer.zero_grad();
      Tensor output = model->forward(input);  // [100, 10]: the batch is kept
      Tensor loss = criterion(output, target);
      loss.backward();
      optimizer.step();
      if (step % 20 == 0) std::printf("step %3d  loss %.6f\n", step, loss.item());
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "02_custom_loss: %s\n", e.what());
    return 1;
  }
}
