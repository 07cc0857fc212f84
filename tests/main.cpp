// GoogleTest main for single-process suites: starts kdp (Kokkos) once for the
// whole executable, since Kokkos cannot be initialised twice in one process.
#include <gtest/gtest.h>

#include "kdp/core/runtime.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kdp::RuntimeOptions options;
  options.init_mpi = false;  // these suites run as one process; MPI suites use mpi_main.cpp
  kdp::Runtime runtime(argc, argv, options);
  return RUN_ALL_TESTS();
}
