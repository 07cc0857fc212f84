// GoogleTest main for MPI suites: starts MPI and Kokkos once; rank 0 prints the
// usual report, other ranks print only their failures (tagged with the rank);
// every rank exits non-zero when any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "kdp/core/kokkos_compat.hpp"
#include "kdp/core/runtime.hpp"

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  kdp::Runtime runtime(argc, argv);
  // The tests run under this space's name (tests/CMakeLists.txt): never under another's.
  if (std::string(kdp::ExecSpace::name()) != KDP_TEST_EXECUTION_SPACE) {
    std::fprintf(stderr, "kdp tests named for %s run on %s\n", KDP_TEST_EXECUTION_SPACE,
                 kdp::ExecSpace::name());
    return 1;
  }
  const int rank = runtime.world_rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any_failed;
}
