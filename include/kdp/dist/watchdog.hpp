#pragma once
/// \file
/// CollectiveWatchdog: a collective that does not complete within its timeout
/// ends the whole job with a message naming the operation, the rank and the
/// training step, instead of leaving every rank waiting forever (a peer that
/// died, a rank that took another branch, a mismatched number of batches).
///
/// Collectives arm the watchdog before they block and disarm it when they
/// return; a monitor thread (started on first use) checks the armed ones a few
/// times per second, so a healthy collective pays only for a lock.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kdp::dist {

/// Ends the job when a collective outlives its timeout.
class CollectiveWatchdog {
 public:
  /// Called with the message when a collective times out; must end the job.
  using Abort = std::function<void(const std::string& message)>;

  /// The timeout comes from KDP_COLLECTIVE_TIMEOUT (seconds) or is 300 s.
  explicit CollectiveWatchdog(Abort abort);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  double timeout_seconds() const { return timeout_; }
  void set_timeout_seconds(double seconds);
  /// The training step named in messages (-1: none).
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  /// Describes the collective being watched (called only when it times out).
  using Describe = std::string (*)(const void* context);

  /// Starts watching a collective; returns a token for disarm(). `context` must
  /// stay valid until disarm(). Neither call allocates once slots exist.
  size_t arm(Describe describe, const void* context, int rank, int size);
  void disarm(size_t token);

  /// The message for a collective that timed out.
  std::string message(const std::string& operation, int rank, int size) const;

 private:
  struct Armed {
    bool active = false;
    Describe describe = nullptr;
    const void* context = nullptr;
    int rank = 0, size = 0;
    int64_t step = -1;
    std::chrono::steady_clock::time_point deadline;
  };
  void monitor();

  Abort abort_;
  double timeout_;
  std::atomic<int64_t> step_{-1};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Armed> armed_;  // slots, reused
  bool stop_ = false;
  std::thread thread_;
};

/// KDP_COLLECTIVE_TIMEOUT in seconds, or `fallback` when unset; throws ValueError
/// when it is not a positive number.
double collective_timeout_from_environment(double fallback = 300.0);

}  // namespace kdp::dist
