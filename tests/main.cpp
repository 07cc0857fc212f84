// GoogleTest main for single-process suites: starts kdp (Kokkos) once for the
// whole executable, since Kokkos cannot be initialised twice in one process.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kdp/core/kokkos_compat.hpp"
#include "kdp/core/runtime.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kdp::RuntimeOptions options;
  options.init_mpi = false;  // these suites run as one process; MPI suites use mpi_main.cpp
  options.threads = KDP_TEST_THREADS;  // the count tests/CMakeLists.txt states (0: the default)
  kdp::Runtime runtime(argc, argv, options);
  // The tests run under this space's name (tests/CMakeLists.txt): never under another's,
  // and with the threads they state.
  if (std::string(kdp::ExecSpace::name()) != KDP_TEST_EXECUTION_SPACE) {
    std::fprintf(stderr, "kdp tests named for %s run on %s\n", KDP_TEST_EXECUTION_SPACE,
                 kdp::ExecSpace::name());
    return 1;
  }
  const int threads = kdp::compat::concurrency(kdp::ExecSpace());
  if (KDP_TEST_THREADS > 0 && threads != KDP_TEST_THREADS) {
    std::fprintf(stderr, "kdp tests on %s state %d threads and have %d (KOKKOS_NUM_THREADS?)\n",
                 KDP_TEST_EXECUTION_SPACE, KDP_TEST_THREADS, threads);
    return 1;
  }
  return RUN_ALL_TESTS();
}
