#include "kdp/dist/watchdog.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::dist {

double collective_timeout_from_environment(double fallback) {
  const char* env = std::getenv("KDP_COLLECTIVE_TIMEOUT");
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(v > 0.0)) {  // names the variable at fault
    throw ValueError(
        fmt::format("KDP_COLLECTIVE_TIMEOUT='{}' is not a positive number of seconds", env));
  }
  return v;
}

CollectiveWatchdog::CollectiveWatchdog(Abort abort)
    : abort_(std::move(abort)), timeout_(collective_timeout_from_environment()) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::set_timeout_seconds(double seconds) {
  KDP_CHECK(seconds > 0.0, ValueError, "timeout {} s is not positive", seconds);
  std::lock_guard<std::mutex> lock(mutex_);
  timeout_ = seconds;
}

std::string CollectiveWatchdog::message(const std::string& operation, int rank, int size) const {
  const int64_t step = step_;
  const std::string at = step >= 0 ? fmt::format(" at step {}", step) : std::string();
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return fmt::format(
      "kdp collective watchdog: {} on rank {} of {} (node {}){} did not complete within {:g} s; "
      "another rank has stopped, never joined it or cannot be reached. Ending the job.",
      operation, rank, size, *host ? host : "?", at, timeout_);
}

size_t CollectiveWatchdog::arm(Describe describe, const void* context, int rank, int size) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_));
  std::lock_guard<std::mutex> lock(mutex_);
  size_t slot = 0;
  while (slot < armed_.size() && armed_[slot].active) ++slot;
  if (slot == armed_.size()) armed_.emplace_back();
  armed_[slot] = Armed{true, describe, context, rank, size, step_, deadline};
  if (!thread_.joinable()) thread_ = std::thread([this] { monitor(); });
  return slot;
}

void CollectiveWatchdog::disarm(size_t token) {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_[token].active = false;
}

void CollectiveWatchdog::monitor() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    // Check a few times per timeout, at least every quarter second.
    const double period = std::min(0.25, timeout_ / 4.0);
    wake_.wait_for(lock, std::chrono::duration<double>(period));
    if (stop_) return;
    const auto now = std::chrono::steady_clock::now();
    for (const Armed& a : armed_) {
      if (!a.active || now < a.deadline) continue;
      const int64_t saved = step_;
      step_ = a.step;
      const std::string msg = message(a.describe(a.context), a.rank, a.size);
      step_ = saved;
      lock.unlock();
      std::fprintf(stderr, "%s\n", msg.c_str());
      std::fflush(stderr);
      abort_(msg);
      std::_Exit(3);  // abort_ must not return; make sure nothing waits on
    }
  }
}

}  // namespace kdp::dist
