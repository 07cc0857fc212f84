#include "kdp/core/device_threads.hpp"

#include <atomic>

#include "kdp/core/threads.hpp"

namespace kdp {

namespace {

// tasks[i], with the exception it throws kept in errors[i].
void run_catching(const std::vector<std::function<void()>>& tasks,
                  std::vector<std::exception_ptr>& errors, size_t i) {
  try {
    tasks[i]();
  } catch (...) {
    errors[i] = std::current_exception();
  }
}

}  // namespace

DeviceThreads::~DeviceThreads() {
  shutdown();
}

void DeviceThreads::shutdown() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, w] : workers_) workers.push_back(std::move(w));
    workers_.clear();
    for (auto& w : together_workers_) workers.push_back(std::move(w));
    together_workers_.clear();
  }
  for (auto& w : workers) {
    if (!w) continue;
    {
      std::lock_guard<std::mutex> lock(w->mutex);
      w->stop = true;
    }
    w->wake.notify_one();
    if (w->thread.joinable()) w->thread.join();
  }
}

// The worker's thread: runs its queue's jobs in order until told to stop.
void DeviceThreads::start(Worker& worker) {
  Worker* w = &worker;
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

DeviceThreads::Worker& DeviceThreads::worker(int instance_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = workers_[instance_id];
  if (!slot) {
    slot = std::make_unique<Worker>();
    start(*slot);
  }
  return *slot;
}

void DeviceThreads::run_on(const std::vector<std::pair<Worker*, std::function<void()>>>& jobs) {
  std::mutex done_mutex;
  std::condition_variable done;
  size_t remaining = jobs.size();
  for (const auto& [w, job] : jobs) {
    {
      std::lock_guard<std::mutex> lock(w->mutex);
      w->queue.emplace_back([&, job = job] {
        job();
        std::lock_guard<std::mutex> lock(done_mutex);
        if (--remaining == 0) done.notify_one();
      });
    }
    w->wake.notify_one();
  }
  std::unique_lock<std::mutex> lock(done_mutex);
  done.wait(lock, [&] { return remaining == 0; });
}

std::vector<std::exception_ptr> DeviceThreads::run_together(
    const std::vector<std::function<void()>>& tasks) {
  std::vector<std::exception_ptr> errors(tasks.size());
  std::unique_lock<std::mutex> mine(together_, std::try_to_lock);
  if (!mine.owns_lock()) {
    // Another call holds the threads (or this is one of its tasks): queued
    // behind its tasks, which wait for each other, these would never start.
    std::vector<std::thread> threads;
    threads.reserve(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
      threads.emplace_back([&, i] { run_catching(tasks, errors, i); });
    }
    for (std::thread& t : threads) t.join();
    return errors;
  }
  std::vector<std::pair<Worker*, std::function<void()>>> jobs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (together_workers_.size() < tasks.size()) together_workers_.resize(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
      std::unique_ptr<Worker>& w = together_workers_[i];
      if (!w) {
        w = std::make_unique<Worker>();
        start(*w);
      }
      jobs.emplace_back(w.get(), [&, i] { run_catching(tasks, errors, i); });
    }
  }
  run_on(jobs);
  return errors;
}

std::vector<std::exception_ptr> DeviceThreads::run(const std::vector<std::function<void()>>& tasks,
                                                   const std::vector<Device>& devices,
                                                   bool concurrent) {
  std::vector<std::exception_ptr> errors(tasks.size());

  // Group the tasks by instance, keeping their order within a group.
  std::map<int, std::vector<size_t>> groups;
  for (size_t i = 0; i < tasks.size(); ++i) groups[devices[i].instance_id()].push_back(i);

  if (!concurrent || groups.size() <= 1) {
    for (size_t i = 0; i < tasks.size(); ++i) run_catching(tasks, errors, i);
    return errors;
  }

  // The instances share this rank's cores, and the BLAS keeps one thread pool
  // whichever instance calls it: while they run at once, each BLAS call gets
  // its share of the threads, so n instances do not oversubscribe the cores.
  const ScopedBlasThreads share(blas_threads() / static_cast<int>(groups.size()));

  std::vector<std::pair<Worker*, std::function<void()>>> jobs;
  for (auto& [instance, indices] : groups) {
    jobs.emplace_back(&worker(instance), [&, idx = indices] {
      for (size_t i : idx) run_catching(tasks, errors, i);
    });
  }
  run_on(jobs);
  return errors;
}

}  // namespace kdp
