// The whole stack in one file: a model of your own, DataParallel over the
// device instances of each rank, DistributedDataParallel over the MPI ranks,
// Fashion-MNIST streamed from HDF5, the Trainer with checkpoints and resume.
// Copy this file to start your own training program.
//
//   mpirun -np 2 04_distributed_training [data.h5] [epochs] [devices per rank]
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "kdp/kdp.hpp"

using namespace kdp;

// A model is a Module that registers its parts and says how to run them.
class Classifier : public nn::Module {
 public:
  Classifier(int64_t inputs, int64_t hidden, int64_t classes) : Module("Classifier") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(inputs, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, hidden));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(hidden, classes));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.1f));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(fc1->forward(x));
    h = drop->forward(relu(fc2->forward(h)));
    return fc3->forward(h);  // logits; the loss applies the softmax
  }
  using Module::forward;

 private:
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  std::shared_ptr<nn::Dropout> drop;
};

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);  // MPI first, then Kokkos
  try {
    dist::Communicator comm = dist::Communicator::world();
    const std::string path = argc > 1 ? argv[1] : "data/fashion-mnist.h5";
    const int64_t epochs = argc > 2 ? std::atoll(argv[2]) : 3;
    const int per_rank = argc > 3 ? std::atoi(argv[3]) : 2;
    if (comm.rank() == 0 && !std::filesystem::exists(path)) data::import_fashion_mnist(path);
    comm.barrier();

    // Data: each rank reads only its share; the test split counts every sample once.
    data::HDF5DatasetOptions opts;
    opts.flatten = true;
    opts.mean = 0.286f;  // Fashion-MNIST's pixel mean and deviation, scaled to [0, 1]
    opts.stddev = 0.353f;
    auto train_set = std::make_shared<data::HDF5Dataset>(path, "train", opts);
    auto test_set = std::make_shared<data::HDF5Dataset>(path, "test", opts);
    data::DistributedSamplerOptions exact;
    exact.exact = true;
    exact.shuffle = false;
    const std::vector<Device> devs = devices(per_rank);
    data::DataLoaderOptions loading;
    loading.batch_size = 64;  // per rank
    loading.device = devs[0];
    data::DataLoader train_loader(
        train_set,
        std::make_shared<data::DistributedSampler>(train_set->size(), comm.size(), comm.rank()),
        loading);
    data::DataLoader test_loader(test_set,
                                 std::make_shared<data::DistributedSampler>(
                                     test_set->size(), comm.size(), comm.rank(), exact),
                                 loading);

    // The model, then the two levels of data parallelism around it.
    manual_seed(42);
    auto model = std::make_shared<Classifier>(train_set->sample_shape().numel(), 256,
                                              train_set->num_classes());
    auto on_devices = std::make_shared<DataParallel>(model, devs);
    dist::DistributedDataParallel parallel(on_devices, comm);

    // The optimizer works on the bare model's parameters: checkpoints get
    // PyTorch's keys (fc1.weight, ...), with no wrapper prefixes.
    optim::AdamOptions adam = optim::adamw_defaults();
    adam.lr = 1e-3;
    optim::AdamW optimizer(model->named_parameters(), adam);
    optim::CosineAnnealingLR schedule(optimizer, epochs);

    train::TrainerOptions t;
    t.epochs = epochs;
    t.checkpoint_dir = "runs/example04/checkpoints";
    t.resume = "auto";  // run it again: it continues where it stopped
    t.metrics_path = "runs/example04/metrics.csv";
    t.monitor = "val_accuracy";
    t.devices = devs;
    train::Trainer trainer(t, comm);
    nn::CrossEntropyLoss loss;
    const train::FitResult result =
        trainer.fit(parallel, std::ref(loss), optimizer, train_loader, &test_loader, &schedule);
    if (result.stopped_by_signal) return train::kExitRequeue;

    const train::EvalResult test = trainer.evaluate(parallel, std::ref(loss), test_loader);
    if (comm.rank() == 0) {
      std::printf("test accuracy %.4f, loss %.4f over %lld samples (%d ranks x %d devices)\n",
                  test.accuracy, test.loss, static_cast<long long>(test.count), comm.size(),
                  per_rank);
      std::printf("checkpoint %s\n", result.last_checkpoint.c_str());
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "04_distributed_training: rank %d: %s\n", runtime.world_rank(), e.what());
    return 1;
  }
}
