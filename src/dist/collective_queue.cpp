#include "collective_queue.hpp"

#include <fmt/format.h>

#include <string_view>

#include "kdp/core/trace.hpp"

namespace kdp::dist::detail {

std::string OpInfo::describe(const void* self) {
  const auto* op = static_cast<const OpInfo*>(self);
  std::string s = fmt::format("{} ({}{}{} {}", op->kind, op->detail, *op->detail ? ", " : "",
                              op->count, op->unit);
  if (*op->route) s += std::string(", via ") + op->route;
  if (*op->name) s += std::string(", ") + op->name;
  return s + ")";
}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

// Runs one collective under the watchdog and marks it complete.
void CollectiveQueue::execute(Request::State& st) {
  st.started = std::chrono::steady_clock::now();
  if (backend_.size() > 1) {
    const size_t token =
        watchdog_.arm(&OpInfo::describe, &st.op.info, backend_.rank(), backend_.size());
    try {
      st.op.run();
    } catch (...) {
      st.error = std::current_exception();
    }
    watchdog_.disarm(token);
  }
  if (!st.error && st.op.after) {
    try {
      st.op.after();
    } catch (...) {
      st.error = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    st.ended = std::chrono::steady_clock::now();
    st.complete = true;
  }
  st.cv.notify_all();
}

void CollectiveQueue::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return (stop_ && queue_.empty()) || (!queue_.empty() && !busy_); });
    if (queue_.empty()) return;
    auto st = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    execute(*st);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

std::shared_ptr<Request::State> CollectiveQueue::submit(Collective op) {
  auto st = std::make_shared<Request::State>();
  st->op = std::move(op);
  st->op.info.name = st->op.name.c_str();
  if (backend_.size() == 1) {
    execute(*st);  // nothing to exchange: complete at once
    return st;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(st);
    if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
  }
  cv_.notify_all();
  return st;
}

namespace {

// The Kokkos Tools region of a blocking collective (queued ones run on the
// communication thread, which opens none).
const char* region_of(const OpInfo& info) {
  const std::string_view kind = info.kind;
  if (kind == "allreduce") return "kdp::dist::allreduce";
  if (kind == "broadcast") return "kdp::dist::broadcast";
  if (kind == "allgather") return "kdp::dist::allgather";
  return "kdp::dist::barrier";
}

}  // namespace

void CollectiveQueue::run_now(Collective op) {
  op.info.name = op.name.c_str();
  trace::Region region(region_of(op.info));
  std::exception_ptr error;
  if (backend_.size() > 1) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
      busy_ = true;
    }
    const size_t token =
        watchdog_.arm(&OpInfo::describe, &op.info, backend_.rank(), backend_.size());
    try {
      op.run();
    } catch (...) {
      error = std::current_exception();
    }
    watchdog_.disarm(token);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
    }
    cv_.notify_all();
  }
  if (error) std::rethrow_exception(error);
  if (op.after) op.after();
}

}  // namespace kdp::dist::detail
