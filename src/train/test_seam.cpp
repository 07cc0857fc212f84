#include "test_seam.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace kdp::train::detail {

TestSeam TestSeam::from_environment(int rank) {
  TestSeam seam;
  if (const char* delay = std::getenv("KDP_TEST_DELAY_RANK")) {
    int delayed = -1;
    double seconds = 0.0;
    if (std::sscanf(delay, "%d:%lf", &delayed, &seconds) == 2 && delayed == rank) {
      seam.delay_s_ = seconds;
    }
  }
  if (const char* log = std::getenv("KDP_TEST_SAMPLE_LOG")) {
    seam.sample_log_ = fmt::format("{}.{}.{}", log, rank, ::getpid());
  }
  return seam;
}

void TestSeam::straggle() const {
  if (delay_s_ > 0.0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
}

void TestSeam::log_samples(int64_t epoch, int64_t step, const std::vector<int64_t>& indices) const {
  if (sample_log_.empty()) return;
  std::string lines;
  for (int64_t i : indices) lines += fmt::format("{} {} {}\n", epoch, step, i);
  if (FILE* f = std::fopen(sample_log_.c_str(), "a")) {
    std::fputs(lines.c_str(), f);
    std::fclose(f);
  }
}

}  // namespace kdp::train::detail
