#pragma once
/// \file
/// StopSignal: turns SIGINT, SIGTERM and SIGUSR1 (the ones schedulers and users
/// send to ask a job to stop) into a flag that long-running work checks between
/// steps, so it can finish cleanly: a half-written file removed, a checkpoint
/// written. The previous handlers come back when it is destroyed.

#include <csignal>
#include <vector>

namespace kdp {

/// Turns SIGINT, SIGTERM and SIGUSR1 into a flag checked between steps.
class StopSignal {
 public:
  explicit StopSignal(std::vector<int> signals = {SIGINT, SIGTERM, SIGUSR1});
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  /// Whether no other StopSignal was alive when this one was made. A program
  /// that installs one first thing (so that a signal during its start-up is
  /// not lost) makes every later one nested: those keep what arrived.
  bool outermost() const { return outermost_; }

  /// Whether one of the signals arrived since construction (or clear()).
  static bool requested();
  /// The signal that arrived (0 for none).
  static int signal();
  static void clear();

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  bool outermost_ = true;
};

}  // namespace kdp
