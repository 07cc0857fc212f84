// DataParallel's cost: a training step (SGD-momentum, cross-entropy) of a
// 784-256-256-10 MLP at batch 256, plain and through DataParallel on 1, 2 and 4
// devices, in the same run. On logical devices (one after another) the target
// is <= 1.10x the plain step; on concurrent devices the speed-up is reported.
//
// On logical devices each replica multiplies batch/n rows, and BLAS runs those
// smaller GEMMs less efficiently than the full batch. M/accumulate/n separates
// that from DataParallel's own cost: the same step as n micro-batches of
// batch/n accumulated into one optimizer step (the very GEMM shapes the
// replicas run, without replicate, scatter, gather or the gradient reduction).
#include <benchmark/benchmark.h>

#include <cstdio>

#include "kdp/kdp.hpp"
#include "perf_reporter.hpp"

using namespace kdp;

namespace {

constexpr int64_t kBatch = 256;

void Step(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));  // 0: the plain model
  const auto devs = devices(n == 0 ? 1 : n);
  manual_seed(0);
  auto model = nn::mlp({784, 256, 256, 10}, "relu", devs[0]);
  std::shared_ptr<nn::Module> runner = model;
  if (n > 0) runner = std::make_shared<DataParallel>(model, devs);
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), o);
  Tensor x = Tensor::randn({kBatch, 784}, devs[0]);
  std::vector<float> labels(kBatch);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 10);
  Tensor y = Tensor::from_host(labels, {kBatch}, devs[0]);
  for (auto _ : state) {
    opt.zero_grad();
    Tensor loss = cross_entropy(runner->forward(x), y);
    loss.backward();
    opt.step();
    devs[0].fence("bench DataParallel");
  }
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(kBatch),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

void Accumulate(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  manual_seed(0);
  auto model = nn::mlp({784, 256, 256, 10}, "relu");
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), o);
  Tensor x = Tensor::randn({kBatch, 784});
  std::vector<float> labels(kBatch);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 10);
  Tensor y = Tensor::from_host(labels, {kBatch});
  const std::vector<Tensor> xs = x.chunk(n, 0), ys = y.chunk(n, 0);
  for (auto _ : state) {
    opt.zero_grad();
    for (int i = 0; i < n; ++i) {
      cross_entropy(model->forward(xs[static_cast<size_t>(i)]), ys[static_cast<size_t>(i)])
          .backward();
    }
    opt.step();
    get_default_device().fence("bench accumulate");
  }
}

}  // namespace

BENCHMARK(Accumulate)
    ->Name("M/accumulate")
    ->Arg(2)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(Step)->Name("M/plain")->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Step)
    ->Name("M/data_parallel")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

int main(int argc, char** argv) {
  kdp::use_the_cpus_blas_kernels(argv);  // before MPI and Kokkos start
  RuntimeOptions options;
  options.init_mpi = false;
  Runtime runtime(argc, argv, options);
  benchmark::Initialize(&argc, argv);
  perf::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  for (int n : {1, 2, 4}) {
    const std::string name = "M/data_parallel/" + std::to_string(n);
    if (!reporter.has(name) || !reporter.has("M/plain/0")) continue;
    const double ratio = reporter.time(name) / reporter.time("M/plain/0");
    if (devices_concurrent(n)) {
      std::printf("SPEEDUP DataParallel on %d concurrent devices vs plain step: %.2fx\n", n,
                  1.0 / ratio);
    } else {
      std::printf(
          "OVERHEAD DataParallel on %d logical devices: %.3fx the plain step "
          "(target <= 1.10: %s)\n",
          n, ratio, ratio <= 1.10 ? "met" : "MISSED");
      const std::string acc = "M/accumulate/" + std::to_string(n);
      if (reporter.has(acc)) {
        std::printf(
            "INFO  of which smaller GEMMs (%d micro-batches vs the plain step): %.3fx, "
            "DataParallel itself (vs those micro-batches): %.3fx\n",
            n, reporter.time(acc) / reporter.time("M/plain/0"),
            reporter.time(name) / reporter.time(acc));
      }
    }
  }
  benchmark::Shutdown();
  return 0;
}
