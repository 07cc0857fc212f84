#include "kdp/core/blas_tuner.hpp"

#include <algorithm>

#include "kdp/core/threads.hpp"

namespace kdp {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

BlasThreadTuner::BlasThreadTuner(int threads, Options options, bool apply)
    : o_(options),
      rank_threads_(std::max(1, threads)),
      apply_(apply),
      active_(options.enabled && threads > 1 && options.window > 0 && options.period > 0),
      current_(rank_threads_),
      incumbent_(rank_threads_),
      left_(std::max(0, options.warm)) {}

BlasThreadTuner::~BlasThreadTuner() {
  if (apply_ && current_ != rank_threads_) set_blas_threads(rank_threads_);
}

void BlasThreadTuner::use(int threads) {
  if (threads == current_) return;
  current_ = threads;
  if (apply_) set_blas_threads(threads);
  skip_next_ = true;  // the other count's threads wake up, or go to sleep
}

int BlasThreadTuner::after_step(double seconds) {
  ++steps_;
  if (!active_) return current_;
  if (phase_ == Phase::Run && current_ == 1) ++on_one_;
  const bool counted = !skip_next_;
  skip_next_ = false;
  switch (phase_) {
    case Phase::Run:
      if (counted) recent_.push_back(seconds);
      if (static_cast<int>(recent_.size()) == o_.window) {
        if (median(recent_) > o_.slowdown * reference_) {  // compare again now
          incumbent_times_ = recent_;
          other_times_.clear();
          recent_.clear();
          phase_ = Phase::TimeOther;
          use(incumbent_ == 1 ? rank_threads_ : 1);
          break;
        }
        recent_.clear();
      }
      [[fallthrough]];
    case Phase::Warm:
      if (--left_ > 0) break;
      phase_ = Phase::TimeCurrent;
      incumbent_times_.clear();
      other_times_.clear();
      break;
    case Phase::TimeCurrent:
      if (counted) incumbent_times_.push_back(seconds);
      if (static_cast<int>(incumbent_times_.size()) < o_.window) break;
      phase_ = Phase::TimeOther;
      use(incumbent_ == 1 ? rank_threads_ : 1);
      break;
    case Phase::TimeOther: {
      if (counted) other_times_.push_back(seconds);
      if (static_cast<int>(other_times_.size()) < o_.window) break;
      const double other = median(other_times_), incumbent = median(incumbent_times_);
      const bool other_wins = other < (1.0 - o_.margin) * incumbent;
      if (other_wins) incumbent_ = current_;
      reference_ = other_wins ? other : incumbent;
      use(incumbent_);
      recent_.clear();
      phase_ = Phase::Run;
      left_ = o_.period;
      break;
    }
  }
  return current_;
}

}  // namespace kdp
