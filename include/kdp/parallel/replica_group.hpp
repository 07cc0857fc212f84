#pragma once
/// \file
/// ReplicaGroup: the replicas of one DataParallel forward, for layers that
/// must agree across them in the middle of the forward (SyncBatchNorm sums its
/// statistics over the whole batch). parallel_apply makes a group when the
/// module asks for one (Module::synchronizes_replicas) and runs every replica
/// on a thread of its own, replicas that share an execution-space instance
/// taking turns on it; each replica's thread knows its group and place
/// (ReplicaGroup::current, current_index).

#include <any>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kdp {

/// The replicas of one DataParallel forward.
class ReplicaGroup {
 public:
  explicit ReplicaGroup(int size);

  int size() const { return size_; }

  /// Every replica calls this with its part, in the same order of calls on
  /// all replicas. Returns, once all have, what `combine` made of the parts
  /// (in replica order); `combine` runs once, on the last replica to arrive.
  /// Throws Error when another replica failed instead of arriving.
  template <class Part, class Result>
  Result exchange(int index, Part part, const std::function<Result(std::vector<Part>&)>& combine) {
    std::any result =
        exchange_any(index, std::any(std::move(part)), [&](std::vector<std::any>& all) {
          std::vector<Part> parts;
          parts.reserve(all.size());
          for (std::any& a : all) parts.push_back(std::any_cast<Part&&>(std::move(a)));
          return std::any(combine(parts));
        });
    return std::any_cast<Result>(result);
  }

  /// A replica failed: every replica waiting in exchange(), or arriving
  /// later, throws instead of waiting for it.
  void fail(const std::string& why);

  /// Takes turns on the execution-space instance `instance`: replicas that
  /// share one run one at a time (released while they wait in exchange()).
  void acquire(int instance);
  void release(int instance);

  /// The group of this thread's replica, or null outside parallel_apply.
  static ReplicaGroup* current();
  static int current_index();

  /// Makes `group` (and `index` in it) current on this thread for the scope.
  class Scope {
   public:
    Scope(ReplicaGroup* group, int index, int instance);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ReplicaGroup* previous_;
    int previous_index_;
    int previous_instance_;
    int instance_;
  };

 private:
  std::any exchange_any(int index, std::any part,
                        const std::function<std::any(std::vector<std::any>&)>& combine);

  int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::any> parts_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  std::any result_;
  std::string failure_;
  std::map<int, bool> busy_;  // instance -> a replica runs on it
};

}  // namespace kdp
