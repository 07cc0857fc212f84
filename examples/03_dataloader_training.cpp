// Training from a DataLoader: first the PyTorch article's example, then the same
// loop on Fashion-MNIST read from HDF5.
//
// The article's example (1000 samples of 10 features with 10 targets, batch 64,
// shuffled, 10 epochs, MSE, SGD) never calls backward() or step(); here the loop
// is complete: zero_grad, forward, loss, backward, step.
//
//   03_dataloader_training [fashion-mnist.h5]
// (without the argument, Fashion-MNIST is imported into a temporary file first)
#include <cstdio>
#include <filesystem>

#include "kdp/kdp.hpp"

using namespace kdp;

// One epoch; returns the mean loss over its batches.
double train_epoch(nn::Module& model, data::DataLoader& loader, const nn::LossFunction& loss_fn,
                   optim::Optimizer& optimizer) {
  double total = 0.0;
  int64_t batches = 0;
  for (data::Batch& batch : loader) {
    optimizer.zero_grad();
    Tensor loss = loss_fn(model.forward(batch.features), batch.labels);
    loss.backward();
    optimizer.step();
    total += loss.item();
    ++batches;
  }
  return total / static_cast<double>(std::max<int64_t>(1, batches));
}

int main(int argc, char** argv) {
  try {
    Runtime runtime(argc, argv);
    manual_seed(0);

    // 1. The article's example.
    auto dataset = data::synthetic_regression(1000, 10, 10, /*seed=*/1);
    data::DataLoaderOptions options;
    options.batch_size = 64;
    data::DataLoader loader(dataset, std::make_shared<data::RandomSampler>(dataset->size(), 0),
                            options);
    auto model = nn::mlp({10, 100, 10});
    nn::MSELoss mse;
    optim::SGD sgd(model->named_parameters(), optim::SGDOptions{0.01});
    for (int64_t epoch = 0; epoch < 10; ++epoch) {
      loader.set_epoch(epoch);  // a new shuffle each epoch
      std::printf("random data   epoch %2lld  loss %.4f\n", static_cast<long long>(epoch),
                  train_epoch(*model, loader, std::ref(mse), sgd));
    }

    // 2. The same loop on Fashion-MNIST from HDF5.
    std::string path = argc > 1 ? argv[1] : "";
    const std::string temp =
        (std::filesystem::temp_directory_path() / "kdp-03-fashion-mnist.h5").string();
    if (path.empty()) {
      data::import_fashion_mnist(temp, "", data::ExistingOutput::Overwrite);  // the example's own
      path = temp;
    }
    data::HDF5DatasetOptions h5;
    h5.flatten = true;
    auto train = std::make_shared<data::HDF5Dataset>(path, "train", h5);
    options.batch_size = 128;
    data::DataLoader fm_loader(train, std::make_shared<data::RandomSampler>(train->size(), 0),
                               options);
    auto classifier = nn::mlp({784, 256, 10});
    nn::CrossEntropyLoss ce;
    optim::AdamOptions adam;
    adam.lr = 1e-3;
    optim::Adam opt(classifier->named_parameters(), adam);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      fm_loader.set_epoch(epoch);
      std::printf("fashion-mnist epoch %2lld  loss %.4f\n", static_cast<long long>(epoch),
                  train_epoch(*classifier, fm_loader, std::ref(ce), opt));
    }
    if (path == temp) std::filesystem::remove(temp);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "03_dataloader_training: %s\n", e.what());
    return 1;
  }
}
