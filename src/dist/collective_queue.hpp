#pragma once
// The order of a communicator's collectives: non-blocking ones run, in the
// order they were started, on a thread of the communicator; a blocking one
// runs on its caller's thread after every queued one. Each runs under the
// collective watchdog.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backend.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/dist/watchdog.hpp"

namespace kdp::dist {

namespace detail {

/// What a collective is, for the watchdog's message (built only on a timeout).
struct OpInfo {
  const char* kind = "";    // "allreduce"
  const char* detail = "";  // "sum"
  size_t count = 0;         // elements or bytes
  const char* unit = "";
  const char* name = "";   // the tensor's name, if any (must outlive the collective)
  const char* route = "";  // how an allreduce travels (algorithms::name)

  static std::string describe(const void* self);
};

/// One collective: the backend call(s), and what follows them (copying staged
/// data back, averaging).
struct Collective {
  OpInfo info;
  std::string name;  // the tensor's, if any
  std::function<void()> run;
  std::function<void()> after;
};

}  // namespace detail

struct Request::State {
  detail::Collective op;
  std::mutex mutex;
  std::condition_variable cv;
  bool complete = false;
  std::exception_ptr error;
  std::chrono::steady_clock::time_point started, ended;
};

namespace detail {

class CollectiveQueue {
 public:
  CollectiveQueue(const Backend& backend, CollectiveWatchdog& watchdog)
      : backend_(backend), watchdog_(watchdog) {}
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  /// Starts `op` after every collective queued before it; its request.
  std::shared_ptr<Request::State> submit(Collective op);
  /// Runs `op` on the calling thread after every queued collective; rethrows
  /// its error.
  void run_now(Collective op);

 private:
  void execute(Request::State& st);
  void work();

  const Backend& backend_;
  CollectiveWatchdog& watchdog_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request::State>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace detail

}  // namespace kdp::dist
