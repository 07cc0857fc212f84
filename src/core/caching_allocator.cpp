#include "kdp/core/caching_allocator.hpp"

namespace kdp {

size_t CachingAllocator::size_class(size_t count) {
  constexpr size_t kMin = 64;
  if (count <= kMin) return kMin;
  size_t top = 1;
  while ((top << 1) <= count) top <<= 1;  // highest power of two <= count
  const size_t step = top / 4;
  return (count + step - 1) / step * step;
}

CachingAllocator::Block CachingAllocator::allocate(size_t count, int instance_id,
                                                   const ExecSpace& space) {
  const size_t rounded = size_class(count);
  const size_t bytes = rounded * sizeof(float);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find({instance_id, rounded});
    if (it != free_.end() && !it->second.empty()) {
      Block block = std::move(it->second.back());
      it->second.pop_back();
      stats_.cache_hits++;
      stats_.bytes_cached -= bytes;
      stats_.bytes_in_use += bytes;
      if (stats_.bytes_in_use > stats_.peak_bytes_in_use) {
        stats_.peak_bytes_in_use = stats_.bytes_in_use;
      }
      return block;
    }
    stats_.allocations++;
    stats_.bytes_in_use += bytes;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) {
      stats_.peak_bytes_in_use = stats_.bytes_in_use;
    }
  }
  return Block(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kdp::CachingAllocator::block"),
      rounded);
}

void CachingAllocator::release(Block&& block, int instance_id) {
  const size_t rounded = block.extent(0);
  const size_t bytes = rounded * sizeof(float);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.releases++;
  stats_.bytes_in_use -= bytes;
  stats_.bytes_cached += bytes;
  free_[{instance_id, rounded}].push_back(std::move(block));
}

void CachingAllocator::note_dedicated_allocation() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.dedicated_allocations++;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::empty_cache() {
  std::map<std::pair<int, size_t>, std::vector<Block>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dropped.swap(free_);
    stats_.bytes_cached = 0;
  }
}

}  // namespace kdp
