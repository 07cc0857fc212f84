// A vision transformer on Fashion-MNIST, data-parallel over MPI ranks: the
// reference VisionTransformer of kdp/nn/transformer.hpp (kdp-train's
// vit(4,64,6,4,128): patches of 4, dim 64, 6 pre-norm layers of 4 heads,
// feed-forward 128, dropout 0.1), AdamW with a cosine schedule, bf16 products
// where the CPU has bf16 matrix units. Its checkpoints carry PyTorch's names:
// a PyTorch user rebuilds the model from the header's description and loads
// them.
//
//   mpirun -np 2 07_vit [data.h5] [epochs] [depth]
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "kdp/kdp.hpp"

using namespace kdp;

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);  // MPI first, then Kokkos
  try {
    dist::Communicator comm = dist::Communicator::world();
    const std::string path = argc > 1 ? argv[1] : "data/fashion-mnist.h5";
    const int64_t epochs = argc > 2 ? std::atoll(argv[2]) : 10;
    nn::ViTOptions vit;  // patch 4, dim 64, depth 6, heads 4, mlp 128, dropout 0.1
    if (argc > 3) vit.depth = std::atoll(argv[3]);
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
    data::DataLoaderOptions loading;
    loading.batch_size = 64;  // per rank
    data::DataLoader train_loader(
        train_set,
        std::make_shared<data::DistributedSampler>(train_set->size(), comm.size(), comm.rank()),
        loading);
    data::DataLoader test_loader(test_set,
                                 std::make_shared<data::DistributedSampler>(
                                     test_set->size(), comm.size(), comm.rank(), exact),
                                 loading);

    manual_seed(42);
    auto model = std::make_shared<nn::VisionTransformer>(train_set->sample_shape(),
                                                         train_set->num_classes(), vit);
    dist::DistributedDataParallel parallel(model, comm);
    optim::AdamOptions adamw = optim::adamw_defaults();
    adamw.lr = 1e-3;
    optim::AdamW optimizer(model->named_parameters(), adamw);
    optim::CosineAnnealingLR schedule(optimizer, epochs);

    train::TrainerOptions t;
    t.epochs = epochs;
    t.precision = Precision::Auto;
    t.checkpoint_dir = "runs/example07/checkpoints";
    t.resume = "auto";  // run it again: it continues where it stopped
    t.metrics_path = "runs/example07/metrics.csv";
    t.monitor = "val_accuracy";
    t.log_every_steps = 100;
    train::Trainer trainer(t, comm);
    nn::CrossEntropyLoss loss;
    const train::FitResult result =
        trainer.fit(parallel, std::ref(loss), optimizer, train_loader, &test_loader, &schedule);
    if (result.stopped_by_signal) return train::kExitRequeue;

    const train::EvalResult test = trainer.evaluate(parallel, std::ref(loss), test_loader);
    if (comm.rank() == 0) {
      std::printf("test accuracy %.4f, loss %.4f over %lld samples (%d ranks, vit(%lld,%lld,%lld,"
                  "%lld,%lld), %s)\n",
                  test.accuracy, test.loss, static_cast<long long>(test.count), comm.size(),
                  static_cast<long long>(vit.patch), static_cast<long long>(vit.dim),
                  static_cast<long long>(vit.depth), static_cast<long long>(vit.heads),
                  static_cast<long long>(vit.mlp), precision_name(trainer.precision()));
      std::printf("checkpoint %s\n", result.last_checkpoint.c_str());
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "07_vit: rank %d: %s\n", runtime.world_rank(), e.what());
    return 1;
  }
}
