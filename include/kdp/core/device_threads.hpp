#pragma once
/// \file
/// DeviceThreads: one persistent host thread per execution-space instance, so
/// that work for several devices runs at the same time where their instances
/// can, and Kokkos calls for one instance always come from one thread.

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kdp/core/device.hpp"

namespace kdp {

/// One persistent host thread per execution-space instance, and threads for
/// tasks that must run at the same time.
class DeviceThreads {
 public:
  DeviceThreads() = default;
  ~DeviceThreads();
  DeviceThreads(const DeviceThreads&) = delete;
  DeviceThreads& operator=(const DeviceThreads&) = delete;

  /// Runs tasks[i] for devices[i]. Tasks of devices that share an instance run one
  /// after another, in order; tasks of distinct concurrent instances run at the
  /// same time on those instances' threads. Returns after every task finished,
  /// with the exception each task threw (or null).
  std::vector<std::exception_ptr> run(const std::vector<std::function<void()>>& tasks,
                                      const std::vector<Device>& devices, bool concurrent);

  /// Runs every task at the same time, each on a persistent thread of its own
  /// (tasks that wait for each other, as replicas meeting in SyncBatchNorm's
  /// forward do), and returns after all finished, with the exception each task
  /// threw (or null). The threads, and what they keep between calls (oneDNN's
  /// primitives, kernels' scratch), serve one call at a time: a call made
  /// while another runs, or from one of its tasks, starts threads for itself.
  std::vector<std::exception_ptr> run_together(const std::vector<std::function<void()>>& tasks);

  /// Stops the threads (the Runtime calls this before Kokkos finalises).
  void shutdown();

 private:
  struct Worker {
    std::thread thread;
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void()>> queue;
    bool stop = false;
  };
  Worker& worker(int instance_id);
  static void start(Worker& w);
  // Each job on its worker; returns when all have run.
  static void run_on(const std::vector<std::pair<Worker*, std::function<void()>>>& jobs);

  std::mutex mutex_;
  std::map<int, std::unique_ptr<Worker>> workers_;
  std::mutex together_;  // held by the run_together that uses together_workers_
  std::vector<std::unique_ptr<Worker>> together_workers_;
};

}  // namespace kdp
