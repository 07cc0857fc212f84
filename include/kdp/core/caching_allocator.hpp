#pragma once
/// \file
/// CachingAllocator: tensor storage is taken from size-bucketed free lists of the
/// device's memory space, so a training step that repeats the same shapes makes
/// no new allocation after its first pass. Blocks are kept per execution-space
/// instance: a block is handed again only to the instance that released it,
/// which keeps stream-ordered reuse safe on GPUs.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kdp/core/kokkos_compat.hpp"

namespace kdp {

/// Counters of a CachingAllocator. `allocations` counts blocks obtained from the
/// memory space; `cache_hits` counts requests served from the free lists.
struct AllocatorStats {
  uint64_t allocations = 0;
  uint64_t cache_hits = 0;
  uint64_t releases = 0;
  /// Dedicated (labelled, uncached) allocations, such as parameters.
  uint64_t dedicated_allocations = 0;
  size_t bytes_in_use = 0;
  size_t bytes_cached = 0;
  size_t peak_bytes_in_use = 0;
  /// Bytes held from the memory space: in use plus cached.
  size_t bytes_held() const { return bytes_in_use + bytes_cached; }
};

/// Size-bucketed free lists of device memory, per execution-space instance.
class CachingAllocator {
 public:
  using Block = Kokkos::View<float*, MemSpace>;

  CachingAllocator() = default;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `count` floats for the instance `instance_id`, new
  /// ones allocated through `space` (so on its GPU where a process drives
  /// several); its contents are uninitialised.
  Block allocate(size_t count, int instance_id, const ExecSpace& space);
  /// Returns a block obtained from allocate() to the free lists.
  void release(Block&& block, int instance_id);

  /// Counts a dedicated allocation made outside the cache (see Storage).
  void note_dedicated_allocation();

  AllocatorStats stats() const;
  /// Starts peak_bytes_in_use again from the bytes in use now (as
  /// torch.cuda.reset_peak_memory_stats), to measure one step's peak.
  void reset_peak();
  /// Gives every cached block back to the memory space.
  void empty_cache();

  /// The size class a request of `count` floats is rounded up to: four classes
  /// per power of two (at most 25 % slack), 64 floats at least.
  static size_t size_class(size_t count);

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<int, size_t>, std::vector<Block>> free_;
  AllocatorStats stats_;
};

}  // namespace kdp
