#pragma once
/// \file
/// The BLAS thread count of a loop of like steps (training), chosen by their
/// speed while the loop runs.

#include <cstdint>
#include <vector>

namespace kdp {

/// Chooses, step by step, between the rank's BLAS threads and one thread,
/// whichever makes the steps faster now. Two BLAS threads are not always
/// faster than one: where the two threads' cores do not share a cache (a
/// virtual machine whose virtual CPUs the host moves between cache domains,
/// two sockets), every product's output written by one thread and read by
/// the other crosses the machine, and the memory-bound work around the
/// products slows several times over. docs/performance.md measures it.
///
/// Every `period` steps it times `window` steps at the count in use, then
/// `window` at the other count, and keeps the other only when its median
/// step is faster by `margin`. Between comparisons it keeps timing the
/// steps, `window` at a time: when their median is `slowdown` times the
/// chosen count's at its comparison, it compares again at once (a host
/// that moves the threads apart slows every step from then on). The
/// first step after a change, and a step after interrupted(), are not timed. The count changes no
/// result: the BLAS divides a product's rows and columns among its threads, never a sum
/// (tests/train check it on a training run that changes it every step).
class BlasThreadTuner {
 public:
  /// When and how the tuner compares the two counts.
  struct Options {
    bool enabled = true;
    int window = 8;         // steps timed at each count
    int period = 512;       // steps between two comparisons
    int warm = 16;          // steps before the first comparison
    double margin = 0.1;    // how much faster the other count must be
    double slowdown = 1.3;  // how much slower steps must become to compare again early
  };

  /// `threads`: the rank's BLAS threads, which it starts with. It tunes
  /// only when enabled and `threads` > 1; with `apply`, it sets its choice in
  /// the BLAS (set_blas_threads) and sets `threads` back when destroyed.
  BlasThreadTuner(int threads, Options options, bool apply = true);
  ~BlasThreadTuner();
  BlasThreadTuner(const BlasThreadTuner&) = delete;
  BlasThreadTuner& operator=(const BlasThreadTuner&) = delete;

  /// After a step that took `seconds`: the BLAS thread count for the next.
  int after_step(double seconds);
  /// Other work ran since the last step (an evaluation, a checkpoint): the
  /// next step's time includes it and is not counted.
  void interrupted() { skip_next_ = true; }

  bool active() const { return active_; }
  int threads() const { return current_; }
  /// Steps that ran on one thread because it was the faster (the timed
  /// windows not counted), of all steps after_step saw.
  int64_t steps_on_one_thread() const { return on_one_; }
  int64_t steps() const { return steps_; }

 private:
  enum class Phase { Warm, TimeCurrent, TimeOther, Run };
  void use(int threads);

  const Options o_;
  const int rank_threads_;
  const bool apply_;
  const bool active_;
  int current_;
  int incumbent_;
  Phase phase_ = Phase::Warm;
  int left_;
  bool skip_next_ = false;
  std::vector<double> incumbent_times_, other_times_, recent_;
  double reference_ = 0.0;  // the chosen count's median step at its comparison
  int64_t on_one_ = 0, steps_ = 0;
};

}  // namespace kdp
