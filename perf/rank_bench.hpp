#pragma once
// Helpers for benchmarks that may run on several ranks: every rank must run the
// same number of iterations (collectives would otherwise deadlock), each
// iteration's time is the slowest rank's, and only rank 0 reports. Through
// kdp's Communicator, so they also build and run without MPI.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <string>

#include "kdp/dist/communicator.hpp"
#include "perf_reporter.hpp"

namespace kdp::perf {

/// Time of `body` on the slowest rank of `comm`, in seconds.
template <class F>
double timed_on_all_ranks(dist::Communicator& comm, F&& body) {
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  body();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  comm.allreduce(&elapsed, 1, dist::ReduceOp::Max);
  return elapsed;
}

/// Reports nothing (ranks other than 0).
class SilentReporter : public RatioReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override { record(runs); }
};

/// Removes "--kdp_quick" from argv; returns whether it was there (smoke tests
/// run each benchmark for a few iterations only).
inline bool take_quick_flag(int& argc, char** argv) {
  bool quick = false;
  int out = 0;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--kdp_quick") == 0) {
      quick = true;
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  return quick;
}

}  // namespace kdp::perf
