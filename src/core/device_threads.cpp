#include "kdp/core/device_threads.hpp"

#include <atomic>

#include "kdp/core/threads.hpp"

namespace kdp {

DeviceThreads::~DeviceThreads() {
  shutdown();
}

void DeviceThreads::shutdown() {
  std::map<int, std::unique_ptr<Worker>> workers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    workers.swap(workers_);
  }
  for (auto& [id, w] : workers) {
    {
      std::lock_guard<std::mutex> lock(w->mutex);
      w->stop = true;
    }
    w->wake.notify_one();
    if (w->thread.joinable()) w->thread.join();
  }
}

DeviceThreads::Worker& DeviceThreads::worker(int instance_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = workers_[instance_id];
  if (!slot) {
    slot = std::make_unique<Worker>();
    Worker* w = slot.get();
    w->thread = std::thread([w] {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock<std::mutex> lock(w->mutex);
          w->wake.wait(lock, [w] { return w->stop || !w->queue.empty(); });
          if (w->queue.empty()) return;
          job = std::move(w->queue.front());
          w->queue.pop_front();
        }
        job();
      }
    });
  }
  return *slot;
}

std::vector<std::exception_ptr> DeviceThreads::run(const std::vector<std::function<void()>>& tasks,
                                                   const std::vector<Device>& devices,
                                                   bool concurrent) {
  std::vector<std::exception_ptr> errors(tasks.size());
  auto run_one = [&](size_t i) {
    try {
      tasks[i]();
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };

  // Group the tasks by instance, keeping their order within a group.
  std::map<int, std::vector<size_t>> groups;
  for (size_t i = 0; i < tasks.size(); ++i) groups[devices[i].instance_id()].push_back(i);

  if (!concurrent || groups.size() <= 1) {
    for (size_t i = 0; i < tasks.size(); ++i) run_one(i);
    return errors;
  }

  // The instances share this rank's cores, and the BLAS keeps one thread pool
  // whichever instance calls it: while they run at once, each BLAS call gets
  // its share of the threads, so n instances do not oversubscribe the cores.
  const ScopedBlasThreads share(blas_threads() / static_cast<int>(groups.size()));

  std::mutex done_mutex;
  std::condition_variable done;
  size_t remaining = groups.size();
  for (auto& [instance, indices] : groups) {
    Worker& w = worker(instance);
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      w.queue.emplace_back([&, idx = indices] {
        for (size_t i : idx) run_one(i);
        std::lock_guard<std::mutex> lock(done_mutex);
        if (--remaining == 0) done.notify_one();
      });
    }
    w.wake.notify_one();
  }
  std::unique_lock<std::mutex> lock(done_mutex);
  done.wait(lock, [&] { return remaining == 0; });
  return errors;
}

}  // namespace kdp
