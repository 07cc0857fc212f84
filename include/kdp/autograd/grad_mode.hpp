#pragma once
/// \file
/// Grad mode: whether ops record the graph for backward. On by default; off
/// inside a NoGradGuard (evaluation, optimizer updates). Per thread.

namespace kdp::autograd {

/// Whether ops record the graph on this thread.
class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool on);
};

/// Turns recording off for its lifetime and restores the previous mode.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Sets grad mode to `on` for its lifetime (carries a caller's mode into worker threads).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool on) : previous_(GradMode::enabled()) { GradMode::set_enabled(on); }
  ~GradModeGuard() { GradMode::set_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace kdp::autograd

namespace kdp {
using autograd::NoGradGuard;
}
