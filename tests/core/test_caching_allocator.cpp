#include <gtest/gtest.h>

#include "kdp/kdp.hpp"

using namespace kdp;

TEST(CachingAllocator, SizeClassesBoundTheSlack) {
  EXPECT_EQ(CachingAllocator::size_class(1), 64u);
  EXPECT_EQ(CachingAllocator::size_class(64), 64u);
  for (size_t n : {65u, 100u, 1000u, 4097u, 123457u, 1u << 20}) {
    const size_t c = CachingAllocator::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(static_cast<double>(c), 1.25 * static_cast<double>(n) + 1) << n;
  }
}

TEST(CachingAllocator, ReusesReleasedBlocks) {
  CachingAllocator& alloc = Runtime::get().allocator();
  const AllocatorStats before = alloc.stats();
  { Tensor a = Tensor::empty({1000, 7}); }
  const AllocatorStats mid = alloc.stats();
  {
    Tensor b = Tensor::empty({1000, 7});  // same size class: from the cache
  }
  const AllocatorStats after = alloc.stats();
  EXPECT_EQ(after.allocations, mid.allocations);
  EXPECT_GE(after.cache_hits, mid.cache_hits + 1);
  EXPECT_GE(mid.allocations + mid.cache_hits, before.allocations + before.cache_hits + 1);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
}

TEST(CachingAllocator, EmptyCacheReturnsMemory) {
  CachingAllocator& alloc = Runtime::get().allocator();
  { Tensor a = Tensor::empty({4096}); }
  EXPECT_GT(alloc.stats().bytes_cached, 0u);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);
}

TEST(CachingAllocator, LabelledTensorsBypassTheCache) {
  CachingAllocator& alloc = Runtime::get().allocator();
  const AllocatorStats before = alloc.stats();
  Tensor w = Tensor::empty_labeled({10, 10}, get_default_device(), "kdp::test::weight");
  const AllocatorStats after = alloc.stats();
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.cache_hits, before.cache_hits);
  EXPECT_EQ(after.dedicated_allocations, before.dedicated_allocations + 1);
}
