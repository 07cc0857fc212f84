#include "kdp/parallel/replica_group.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp {

namespace {
thread_local ReplicaGroup* current_group = nullptr;
thread_local int current_replica = 0;
thread_local int current_instance = 0;
}  // namespace

ReplicaGroup::ReplicaGroup(int size) : size_(size), parts_(static_cast<size_t>(size)) {
  KDP_CHECK(size >= 1, ValueError, "size {} < 1", size);
}

ReplicaGroup* ReplicaGroup::current() {
  return current_group;
}

int ReplicaGroup::current_index() {
  return current_replica;
}

void ReplicaGroup::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.empty()) failure_ = why;
  changed_.notify_all();
}

void ReplicaGroup::acquire(int instance) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !busy_[instance]; });
  busy_[instance] = true;
}

void ReplicaGroup::release(int instance) {
  std::lock_guard<std::mutex> lock(mutex_);
  busy_[instance] = false;
  changed_.notify_all();
}

std::any ReplicaGroup::exchange_any(
    int index, std::any part, const std::function<std::any(std::vector<std::any>&)>& combine) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto failed = [&] {
    return Error(fmt::format("kdp::ReplicaGroup: replica {} stopped waiting for the others: {}",
                             index, failure_));
  };
  if (!failure_.empty()) throw failed();
  parts_[static_cast<size_t>(index)] = std::move(part);
  const uint64_t round = round_;
  if (++arrived_ == size_) {
    try {
      result_ = combine(parts_);
    } catch (const std::exception& e) {
      failure_ = fmt::format("combining in replica {} failed: {}", index, e.what());
      changed_.notify_all();
      throw;
    }
    arrived_ = 0;
    for (std::any& p : parts_) p.reset();
    ++round_;
    changed_.notify_all();
    return result_;
  }
  // Let a replica that shares this instance run while this one waits.
  const int instance = current_instance;
  busy_[instance] = false;
  changed_.notify_all();
  changed_.wait(lock, [&] { return round_ != round || !failure_.empty(); });
  if (round_ == round) throw failed();
  std::any result = result_;  // the next round cannot finish before this replica arrives again
  changed_.wait(lock, [&] { return !busy_[instance]; });
  busy_[instance] = true;
  return result;
}

ReplicaGroup::Scope::Scope(ReplicaGroup* group, int index, int instance)
    : previous_(current_group),
      previous_index_(current_replica),
      previous_instance_(current_instance),
      instance_(instance) {
  current_group = group;
  current_replica = index;
  current_instance = instance;
  if (group != nullptr) group->acquire(instance);
}

ReplicaGroup::Scope::~Scope() {
  if (current_group != nullptr) current_group->release(instance_);
  current_group = previous_;
  current_replica = previous_index_;
  current_instance = previous_instance_;
}

}  // namespace kdp
