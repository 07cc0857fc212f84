#pragma once
// Helpers for benchmarks that measure MPI itself (raw MPI is their reference):
// rank_bench.hpp's, with the slowest rank's time over a raw communicator.

#include <mpi.h>

#include "rank_bench.hpp"

namespace kdp::perf {

/// Time of `body` on the slowest rank, in seconds.
template <class F>
double timed_on_all_ranks(MPI_Comm comm, F&& body) {
  MPI_Barrier(comm);
  const auto start = std::chrono::steady_clock::now();
  body();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, comm);
  return elapsed;
}

}  // namespace kdp::perf
