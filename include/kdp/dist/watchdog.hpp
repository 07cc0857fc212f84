#pragma once
/// \file
/// CollectiveWatchdog: a collective that does not complete within its timeout
/// ends the whole job with a message naming the operation, the rank and the
/// training step, instead of leaving every rank waiting forever (a peer that
/// died, a rank that took another branch, a mismatched number of batches).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace kdp::dist {

class CollectiveWatchdog {
 public:
  /// The timeout from KDP_COLLECTIVE_TIMEOUT (seconds) or 300 s.
  CollectiveWatchdog();

  double timeout_seconds() const { return timeout_; }
  void set_timeout_seconds(double seconds);
  /// The training step named in messages (-1: none).
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  /// Calls `done` until it returns true (backing off from spinning to short
  /// sleeps). When the timeout passes first, prints the watchdog's message to
  /// stderr and calls `abort` (which ends the job); if `abort` returns, throws
  /// CommError with the same message.
  void wait(const std::string& operation, int rank, int size, const std::function<bool()>& done,
            const std::function<void(const std::string&)>& abort) const;

  /// The message for a collective that timed out.
  std::string message(const std::string& operation, int rank, int size) const;

 private:
  double timeout_;
  int64_t step_ = -1;
};

/// KDP_COLLECTIVE_TIMEOUT in seconds, or `fallback` when unset; throws ValueError
/// when it is not a positive number.
double collective_timeout_from_environment(double fallback = 300.0);

}  // namespace kdp::dist
