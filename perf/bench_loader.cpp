// The HDF5 loader against a raw sequential H5Dread of the same bytes, and the
// share of a training step spent waiting for data.
//
//  - raw:    one pass over /train/images in contiguous blocks of 256 rows
//            (HDF5's default chunk cache: every pass reads and decompresses)
//  - loader: one epoch of shuffled batches of 256 (DataLoader, prefetch 2,
//            scaled to float and copied to the device), from a freshly opened
//            dataset (cold: it reads and decompresses too); "warm" times
//            epochs on one dataset after a first, untimed epoch has filled its
//            block cache, which then serves every batch
//    ratio raw / loader (cold), target >= 0.8.
//  - wait:   a 784-256-256-10 training step fed by the loader; the share of
//            its time spent waiting for batches, target < 2 %.
// The data is Fashion-MNIST (imported to a temporary file) when installed,
// else random images of the same shape.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "io/hdf5.hpp"
#include "kdp/kdp.hpp"
#include "perf_reporter.hpp"

using namespace kdp;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kBatch = 256;
std::string data_path;

std::string make_data() {
  const std::string path =
      (fs::temp_directory_path() / ("kdp-bench-loader-" + std::to_string(::getpid()) + ".h5"))
          .string();
  try {
    data::import_fashion_mnist(path);
    return path;
  } catch (const IOError&) {
  }
  // Random images with the importer's layout (chunked, compressed).
  const std::string dir = fs::temp_directory_path().string();
  std::mt19937 gen(1);
  std::vector<uint8_t> img(60000u * 784u), lab(60000u);
  for (auto& v : img) v = static_cast<uint8_t>(gen() & 0xFF);
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<uint8_t>(i % 10);
  const std::string ip = dir + "/kdp-bench-img.idx", lp = dir + "/kdp-bench-lab.idx";
  data::write_idx(ip, {60000, 28, 28}, img, false);
  data::write_idx(lp, {60000}, lab, false);
  data::import_idx({{"train", ip, lp}}, path, data::ImportOptions{});
  fs::remove(ip);
  fs::remove(lp);
  return path;
}

void Raw(benchmark::State& state) {
  io::h5::File f = io::h5::File::open(data_path);
  io::h5::Dataset images = f.open_dataset("/train/images");
  const int64_t n = images.dims()[0];
  std::vector<uint8_t> buf(static_cast<size_t>(kBatch * 784));
  for (auto _ : state) {
    for (int64_t start = 0; start + kBatch <= n; start += kBatch) {
      images.read_rows<uint8_t>(start, kBatch, buf.data());
      benchmark::DoNotOptimize(buf.data());
    }
  }
  state.SetBytesProcessed(state.iterations() * (n / kBatch) * kBatch * 784);
}

void Loader(benchmark::State& state) {
  const bool cold = state.range(0) == 0;
  data::HDF5DatasetOptions o;
  o.flatten = true;
  auto ds = std::make_shared<data::HDF5Dataset>(data_path, "train", o);
  int64_t epoch = 0;
  int64_t batches = 0;
  auto one_epoch = [&] {
    data::DataLoaderOptions lo;
    lo.batch_size = kBatch;
    lo.drop_last = true;
    data::DataLoader loader(ds, std::make_shared<data::RandomSampler>(ds->size(), 0), lo);
    loader.set_epoch(epoch++);
    for (data::Batch& b : loader) benchmark::DoNotOptimize(b.features.data());
    batches = loader.num_batches();
  };
  if (!cold) one_epoch();  // fills the block cache before the timed epochs
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      ds = std::make_shared<data::HDF5Dataset>(data_path, "train", o);
      state.ResumeTiming();
    }
    one_epoch();
  }
  state.SetBytesProcessed(state.iterations() * batches * kBatch * 784);
}

void TrainingWait(benchmark::State& state) {
  data::HDF5DatasetOptions o;
  o.flatten = true;
  auto ds = std::make_shared<data::HDF5Dataset>(data_path, "train", o);
  data::DataLoaderOptions lo;
  lo.batch_size = kBatch;
  lo.drop_last = true;
  data::DataLoader loader(ds, std::make_shared<data::RandomSampler>(ds->size(), 0), lo);
  auto model = nn::mlp({784, 256, 256, 10});
  optim::SGDOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), so);
  const int64_t steps = std::min<int64_t>(state.range(0), loader.num_batches());
  double total = 0.0;
  for (auto _ : state) {
    const double wait_before = loader.wait_seconds();
    const auto start = std::chrono::steady_clock::now();
    int64_t k = 0;
    for (data::Batch& b : loader) {
      opt.zero_grad();
      cross_entropy(model->forward(b.features), b.labels).backward();
      opt.step();
      if (++k == steps) break;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    total += elapsed;
    state.counters["wait_share"] = (loader.wait_seconds() - wait_before) / elapsed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  kdp::use_the_cpus_blas_kernels(argv);  // before MPI and Kokkos start
  RuntimeOptions options;
  options.init_mpi = false;
  Runtime runtime(argc, argv, options);
  benchmark::Initialize(&argc, argv);
  data_path = make_data();
  benchmark::RegisterBenchmark("loader/raw_h5dread", Raw)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("loader/shuffled_cold", Loader)
      ->Arg(0)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("loader/shuffled_warm", Loader)
      ->Arg(1)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("loader/training_wait", TrainingWait)
      ->Arg(60)
      ->Iterations(2)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  perf::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratio("loader (shuffled, b256, cold) vs raw sequential H5Dread",
                       "loader/shuffled_cold/0", "loader/raw_h5dread", 0.8);
  reporter.print_ratio("loader (shuffled, b256, warm) vs raw sequential H5Dread",
                       "loader/shuffled_warm/1", "loader/raw_h5dread", 0.8);
  if (reporter.has("loader/training_wait/60")) {
    const double share = reporter.counter("loader/training_wait/60", "wait_share");
    std::printf(
        "WAIT  share of a 784-256-256-10 step waiting for data: %.2f %% (target < 2 %%: %s)\n",
        share * 100.0, share < 0.02 ? "met" : "MISSED");
  }
  fs::remove(data_path);
  benchmark::Shutdown();
  return 0;
}
