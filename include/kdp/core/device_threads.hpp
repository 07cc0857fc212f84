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
#include <vector>

#include "kdp/core/device.hpp"

namespace kdp {

/// One persistent host thread per execution-space instance.
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

  std::mutex mutex_;
  std::map<int, std::unique_ptr<Worker>> workers_;
};

}  // namespace kdp
