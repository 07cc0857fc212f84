// DataParallel's forward over every available device.
//
// The first example of the PyTorch article this library follows, with its
// mistake put right: the model keeps the batch (its x.view(-1) flattened 100
// samples into one vector, which fc1 cannot take). The 100 x 10 input is split
// over the devices, each runs a replica of the model, and the outputs are
// gathered back into one [100, 10] tensor.
//
//   01_data_parallel_forward [devices]   (default: kdp::device_count())
#include <cstdio>
#include <cstdlib>

#include "kdp/kdp.hpp"

using namespace kdp;

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

int main(int argc, char** argv) {
  try {
    Runtime runtime(argc, argv);
    const int n = argc > 1 ? std::atoi(argv[1]) : device_count();
    const std::vector<Device> devs = devices(n);
    std::printf("%d device(s), %s:\n", n,
                devices_concurrent(n) ? "running at the same time" : "running one after another");
    for (const Device& d : devs) std::printf("  %s\n", d.str().c_str());

    auto model = std::make_shared<DataParallel>(std::make_shared<MyModel>(), devs);
    Tensor input = Tensor::randn({100, 10}, devs[0]);
    Tensor output = model->forward(input);

    std::printf("output shape %s on %s\n", output.shape().str().c_str(),
                output.device().str().c_str());
    const std::vector<float> values = output.to_vector();
    std::printf("first row:");
    for (int j = 0; j < 10; ++j) std::printf(" %.4f", values[static_cast<size_t>(j)]);
    std::printf("\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "01_data_parallel_forward: %s\n", e.what());
    return 1;
  }
}
