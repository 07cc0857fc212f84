#pragma once
/// \file
/// Storage: the contiguous memory behind one or more tensors. Short-lived
/// storage comes from the runtime's CachingAllocator and goes back to it;
/// long-lived storage (parameters) is a dedicated View with a label that says
/// what it is ("kdp::Linear::weight"), so Kokkos Tools report it by name.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kdp/core/device.hpp"

namespace kdp {

/// Contiguous memory behind tensors: cached, or a labelled dedicated View.
class Storage {
 public:
  /// `count` uninitialised floats from the caching allocator.
  Storage(size_t count, const Device& device);
  /// `count` uninitialised floats in a dedicated View labelled `label`.
  Storage(size_t count, const Device& device, const std::string& label);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  float* data() const { return view_.data(); }
  size_t size() const { return count_; }
  bool cached() const { return cached_; }

  /// Incremented by every in-place write, so that autograd can tell that a
  /// tensor it saved for backward was changed.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Kokkos::View<float*, MemSpace> view_;
  size_t count_ = 0;
  int instance_id_ = 0;
  bool cached_ = false;
  std::atomic<uint64_t> version_{0};
};

}  // namespace kdp
