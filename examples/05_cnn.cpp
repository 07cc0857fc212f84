// Horovod's PyTorch MNIST example (examples/pytorch/pytorch_mnist.py) in C++:
// the same CNN, data-parallel over the device instances of each rank
// (DataParallel) and over MPI ranks (DistributedDataParallel), on
// Fashion-MNIST images [1, 28, 28] streamed from HDF5. With `sync` as the
// fourth argument a BatchNorm after each convolution normalises with the
// whole batch's statistics across devices and ranks (SyncBatchNorm).
//
//   mpirun -np 2 05_cnn [data.h5] [epochs] [devices per rank] [sync]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "kdp/kdp.hpp"

using namespace kdp;

// Horovod's Net: conv 1->10 (5x5), pool, ReLU; conv 10->20 (5x5), channel
// dropout, pool, ReLU; 320 -> 50 -> 10. With `batch_norm`, a BatchNorm2d
// after each convolution (converted to SyncBatchNorm below when asked).
class Net : public nn::Module {
 public:
  explicit Net(bool batch_norm) : Module("Net"), batch_norm_(batch_norm) {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 10, 5));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(10, 20, 5));
    conv2_drop = register_module("conv2_drop", std::make_shared<nn::Dropout2d>(0.5f));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(320, 50));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(50, 10));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5f));
    if (batch_norm) {
      bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(10));
      bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(20));
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = conv1->forward(x);
    if (batch_norm_) h = bn1->forward(h);
    h = relu(max_pool2d(h, 2));
    h = conv2->forward(h);
    if (batch_norm_) h = bn2->forward(h);
    h = relu(max_pool2d(conv2_drop->forward(h), 2));
    h = drop->forward(relu(fc1->forward(h.reshape({h.size(0), 320}))));
    return fc2->forward(h);  // logits; the loss applies the (log-)softmax
  }
  using Module::forward;

 private:
  bool batch_norm_;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dropout2d> conv2_drop;
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
};

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);  // MPI first, then Kokkos
  try {
    dist::Communicator comm = dist::Communicator::world();
    const std::string path = argc > 1 ? argv[1] : "data/fashion-mnist.h5";
    const int64_t epochs = argc > 2 ? std::atoll(argv[2]) : 3;
    const int per_rank = argc > 3 ? std::atoi(argv[3]) : 2;
    const bool sync = argc > 4 && std::strcmp(argv[4], "sync") == 0;
    if (comm.rank() == 0 && !std::filesystem::exists(path)) data::import_fashion_mnist(path);
    comm.barrier();

    // Images [1, 28, 28], normalised; each rank reads its share.
    data::HDF5DatasetOptions images;
    images.as_images = true;
    images.mean = 0.286f;  // Fashion-MNIST's pixel mean and deviation, scaled to [0, 1]
    images.stddev = 0.353f;
    auto train_set = std::make_shared<data::HDF5Dataset>(path, "train", images);
    auto test_set = std::make_shared<data::HDF5Dataset>(path, "test", images);
    data::DistributedSamplerOptions exact;
    exact.exact = true;
    exact.shuffle = false;
    const std::vector<Device> devs = devices(per_rank);
    data::DataLoaderOptions loading;
    loading.batch_size = 64;  // per rank, as Horovod's example
    loading.device = devs[0];
    data::DataLoader train_loader(
        train_set,
        std::make_shared<data::DistributedSampler>(train_set->size(), comm.size(), comm.rank()),
        loading);
    data::DataLoader test_loader(test_set,
                                 std::make_shared<data::DistributedSampler>(
                                     test_set->size(), comm.size(), comm.rank(), exact),
                                 loading);

    // The model; SyncBatchNorm where asked; then the two levels of parallelism.
    manual_seed(42);
    auto model = std::make_shared<Net>(sync);
    if (sync) nn::convert_sync_batchnorm(model);
    auto on_devices = std::make_shared<DataParallel>(model, devs);
    dist::DistributedDataParallel parallel(on_devices, comm);

    // Horovod scales the learning rate by the number of workers.
    optim::SGDOptions sgd;
    sgd.lr = 0.01 * comm.size();
    sgd.momentum = 0.5;
    optim::SGD optimizer(model->named_parameters(), sgd);

    train::TrainerOptions t;
    t.epochs = epochs;
    t.monitor = "val_accuracy";
    t.devices = devs;
    t.log_every_steps = 100;
    train::Trainer trainer(t, comm);
    nn::CrossEntropyLoss loss;
    const train::FitResult result =
        trainer.fit(parallel, std::ref(loss), optimizer, train_loader, &test_loader);
    if (result.stopped_by_signal) return 128 + result.signal;

    const train::EvalResult test = trainer.evaluate(parallel, std::ref(loss), test_loader);
    if (comm.rank() == 0) {
      std::printf("test accuracy %.4f, loss %.4f over %lld samples (%d ranks x %d devices%s)\n",
                  test.accuracy, test.loss, static_cast<long long>(test.count), comm.size(),
                  per_rank, sync ? ", SyncBatchNorm" : "");
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "05_cnn: rank %d: %s\n", runtime.world_rank(), e.what());
    return 1;
  }
}
