#include "kdp/core/stop_signal.hpp"

#include <atomic>

namespace kdp {

namespace {
// Written from a signal handler: a lock-free atomic is all it may touch.
std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> alive{0};  // StopSignal objects in existence

extern "C" void on_stop_signal(int sig) {
  received.store(sig);
}
}  // namespace

StopSignal::StopSignal(std::vector<int> signals) : signals_(std::move(signals)) {
  outermost_ = alive.fetch_add(1) == 0;
  previous_.resize(signals_.size());
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < signals_.size(); ++i) sigaction(signals_[i], &action, &previous_[i]);
}

StopSignal::~StopSignal() {
  for (size_t i = 0; i < signals_.size(); ++i) sigaction(signals_[i], &previous_[i], nullptr);
  alive.fetch_sub(1);
}

bool StopSignal::requested() {
  return received.load() != 0;
}
int StopSignal::signal() {
  return received.load();
}
void StopSignal::clear() {
  received.store(0);
}

}  // namespace kdp
