#include "kdp/dist/watchdog.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kdp/core/error.hpp"

namespace kdp::dist {

double collective_timeout_from_environment(double fallback) {
  const char* env = std::getenv("KDP_COLLECTIVE_TIMEOUT");
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(v > 0.0)) {
    throw ValueError(
        fmt::format("KDP_COLLECTIVE_TIMEOUT='{}' is not a positive number of seconds", env));
  }
  return v;
}

CollectiveWatchdog::CollectiveWatchdog() : timeout_(collective_timeout_from_environment()) {}

void CollectiveWatchdog::set_timeout_seconds(double seconds) {
  if (!(seconds > 0.0)) {
    throw ValueError(
        fmt::format("kdp::dist::CollectiveWatchdog: timeout {} s is not positive", seconds));
  }
  timeout_ = seconds;
}

std::string CollectiveWatchdog::message(const std::string& operation, int rank, int size) const {
  const std::string step = step_ >= 0 ? fmt::format(" at step {}", step_) : std::string();
  return fmt::format(
      "kdp collective watchdog: {} on rank {} of {}{} did not complete within {:g} s; another "
      "rank has stopped or never joined it. Ending the job.",
      operation, rank, size, step, timeout_);
}

void CollectiveWatchdog::wait(const std::string& operation, int rank, int size,
                              const std::function<bool()>& done,
                              const std::function<void(const std::string&)>& abort) const {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
  // Spin first (collectives of a healthy job finish in microseconds), then back
  // off so that waiting ranks leave the cores to the ones still computing.
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    if (done()) return;
    if (Clock::now() >= deadline) break;
    if (polls > 200) {
      pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
      std::this_thread::sleep_for(pause);
    } else if (polls > 50) {
      std::this_thread::yield();
    }
  }
  const std::string msg = message(operation, rank, size);
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  abort(msg);
  throw CommError(msg);
}

}  // namespace kdp::dist
