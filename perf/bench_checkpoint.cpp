// Saving and loading a checkpoint of the L model (784-1024-1024-10 with Adam
// state: 3 x 1.86 M floats) against a raw HDF5 write and read of the same
// bytes (one float dataset per tensor, H5Fflush), in the same run.
// Targets: save within 2x of the raw write; load at least 0.8 of the raw read
// (every dataset checked and read before any parameter changes).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>

#include "io/hdf5.hpp"
#include "kdp/kdp.hpp"
#include "perf_reporter.hpp"

using namespace kdp;
namespace fs = std::filesystem;

namespace {

std::string dir;
std::shared_ptr<nn::Sequential> model;
std::unique_ptr<optim::Adam> adam;

void Setup() {
  model = nn::mlp({784, 1024, 1024, 10});
  adam = std::make_unique<optim::Adam>(model->named_parameters(), optim::AdamOptions{});
  adam->zero_grad();
  cross_entropy(model->forward(Tensor::randn({8, 784})), Tensor::zeros({8})).backward();
  adam->step();  // creates the moments
}

// Every tensor a checkpoint holds, as host vectors.
std::vector<std::pair<std::string, std::vector<float>>> payload() {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& [name, t] : model->state_dict()) out.emplace_back("m_" + name, t.to_vector());
  const auto st = adam->state_dict();
  for (const auto& [p, entries] : st.tensors) {
    for (const auto& [k, t] : entries) out.emplace_back("o_" + p + "_" + k, t.to_vector());
  }
  return out;
}

void write_raw(const std::vector<std::pair<std::string, std::vector<float>>>& data,
               const std::string& path) {
  io::h5::File f = io::h5::File::create(path);
  for (const auto& [name, v] : data) {
    f.create_dataset(name, io::h5::Type::Float32, {static_cast<int64_t>(v.size())})
        .write_all(v.data());
  }
  f.flush();
  f.close();
  io::fsync_file(path);
}

void RawWrite(benchmark::State& state) {
  const auto data = payload();
  for (auto _ : state) write_raw(data, dir + "/raw.h5");
}

// Every dataset into memory that holds them all when the read ends, as a
// load must, allocated and touched once (kdp's allocator, too, hands the load
// blocks the previous load gave back).
void RawRead(benchmark::State& state) {
  const std::string path = dir + "/raw.h5";
  const auto data = payload();
  write_raw(data, path);
  std::vector<std::vector<float>> into;
  for (const auto& [name, v] : data) into.emplace_back(v.size(), 0.0f);
  for (auto _ : state) {
    io::h5::File f = io::h5::File::open(path);
    size_t i = 0;
    for (const auto& [name, v] : data) f.open_dataset(name).read_all(into[i++].data());
    benchmark::DoNotOptimize(into.data());
    benchmark::ClobberMemory();
  }
}

// Each dataset into a vector freed before the next is read: the same few
// megabytes, in the caches, for every dataset. No load can keep its tensors
// that way; shown beside the read above.
void RawReadDiscarding(benchmark::State& state) {
  const std::string path = dir + "/raw.h5";
  write_raw(payload(), path);
  for (auto _ : state) {
    io::h5::File f = io::h5::File::open(path);
    for (const std::string& name : f.members())
      benchmark::DoNotOptimize(f.open_dataset(name).read_all<float>());
  }
}

void Save(benchmark::State& state) {
  io::TrainingState st;
  for (auto _ : state) io::save_checkpoint(dir + "/ckpt.h5", *model, *adam, st);
}

void Load(benchmark::State& state) {
  io::save_checkpoint(dir + "/ckpt.h5", *model, *adam, io::TrainingState{});
  for (auto _ : state) io::load_checkpoint(dir + "/ckpt.h5", *model, *adam);
}

}  // namespace

int main(int argc, char** argv) {
  kdp::use_the_cpus_blas_kernels(argv);  // before MPI and Kokkos start
  RuntimeOptions options;
  options.init_mpi = false;
  Runtime runtime(argc, argv, options);
  benchmark::Initialize(&argc, argv);
  dir = (fs::temp_directory_path() / ("kdp-bench-ckpt-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  Setup();
  benchmark::RegisterBenchmark("checkpoint/raw_write", RawWrite)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("checkpoint/save", Save)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("checkpoint/raw_read", RawRead)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("checkpoint/raw_read_discarding", RawReadDiscarding)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("checkpoint/load", Load)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  perf::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratio("checkpoint save vs raw HDF5 write (target 0.5 = 2x)", "checkpoint/save",
                       "checkpoint/raw_write", 0.5);
  reporter.print_ratio("checkpoint load vs raw HDF5 read", "checkpoint/load", "checkpoint/raw_read",
                       0.8);
  fs::remove_all(dir);
  adam.reset();  // tensors must go before the Runtime finalises Kokkos
  model.reset();
  benchmark::Shutdown();
  return 0;
}
