// Communicator::allreduce against raw MPI_Allreduce on the same buffer sizes
// (1 KB to 64 MB), in the same run. Run under mpirun (2 ranks or more).
// Target: ratio >= 0.95 at every size.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <cstdio>

#include "kdp/kdp.hpp"
#include "mpi_bench.hpp"

using namespace kdp;

namespace {

MPI_Comm raw_comm = MPI_COMM_NULL;
dist::Communicator* kdp_comm = nullptr;

void RawAllreduce(benchmark::State& state) {
  std::vector<float> buf(static_cast<size_t>(state.range(0)) / sizeof(float), 1.0f);
  for (auto _ : state) {
    state.SetIterationTime(perf::timed_on_all_ranks(raw_comm, [&] {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM,
                    raw_comm);
    }));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void KdpAllreduce(benchmark::State& state) {
  Tensor t = Tensor::ones({state.range(0) / static_cast<int64_t>(sizeof(float))});
  for (auto _ : state) {
    state.SetIterationTime(
        perf::timed_on_all_ranks(raw_comm, [&] { kdp_comm->allreduce(t, dist::ReduceOp::Sum); }));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

const std::vector<int64_t> kSizes = {1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20};

int64_t iterations_for(int64_t bytes, bool quick) {
  const int64_t n = bytes <= (256 << 10) ? 2000 : (bytes <= (4 << 20) ? 100 : 10);
  return quick ? std::max<int64_t>(2, n / 100) : n;
}

}  // namespace

int main(int argc, char** argv) {
  kdp::use_the_cpus_blas_kernels(argv);  // before MPI and Kokkos start
  const bool quick = perf::take_quick_flag(argc, argv);
  RuntimeOptions options;
  Runtime runtime(argc, argv, options);
  dist::Communicator comm = dist::Communicator::world();
  kdp_comm = &comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm);
  benchmark::Initialize(&argc, argv);
  for (int64_t bytes : kSizes) {
    // Alternate raw and kdp per size so that both see the same machine state.
    benchmark::RegisterBenchmark("allreduce/raw_mpi", RawAllreduce)
        ->Arg(bytes)
        ->Iterations(iterations_for(bytes, quick))
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("allreduce/kdp", KdpAllreduce)
        ->Arg(bytes)
        ->Iterations(iterations_for(bytes, quick))
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  perf::RatioReporter loud;
  perf::SilentReporter silent;
  perf::RatioReporter& reporter = comm.rank() == 0 ? loud : silent;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (comm.rank() == 0) {
    std::printf("ranks: %d, threads per rank: %d\n", comm.size(), runtime.threads());
    for (int64_t bytes : kSizes) {
      const std::string arg = "/" + std::to_string(bytes);
      reporter.print_ratio("allreduce " + std::to_string(bytes) + " B, Communicator vs MPI",
                           "allreduce/kdp" + arg, "allreduce/raw_mpi" + arg, 0.95);
    }
  }
  benchmark::Shutdown();
  MPI_Comm_free(&raw_comm);
  return 0;
}
