// fork_join and host_blocks: every block once, on the threads asked for, with
// a block's exception brought back to the caller.
#include "kernels/fork_join.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kdp/core/device.hpp"

using kdp::detail::fork_join;

TEST(ForkJoin, RunsEveryBlockOnceOnUpToTheThreadsAsked) {
  for (int threads : {1, 2, 3, 4}) {
    for (int64_t blocks : {int64_t{1}, int64_t{5}, int64_t{64}}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(blocks));
      std::mutex m;
      std::set<std::thread::id> ids;
      // Each block waits (up to a deadline) for a second thread to have taken
      // one, so that a busy machine cannot make the pool look idle.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      std::atomic<size_t> seen{0};
      fork_join(threads, blocks, [&](int64_t b) {
        runs[static_cast<size_t>(b)].fetch_add(1);
        {
          std::lock_guard<std::mutex> lock(m);
          ids.insert(std::this_thread::get_id());
          seen = ids.size();
        }
        while (threads > 1 && blocks > 1 && seen < 2 &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      });
      for (int64_t b = 0; b < blocks; ++b) {
        ASSERT_EQ(runs[static_cast<size_t>(b)].load(), 1) << threads << " threads, block " << b;
      }
      EXPECT_LE(ids.size(), static_cast<size_t>(threads));
      if (threads == 1) {
        EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u);
      }
      if (threads > 1 && blocks > 1) {
        EXPECT_GT(ids.size(), 1u) << threads << " threads";
      }
    }
  }
}

TEST(ForkJoin, BringsABlocksExceptionBackAndRunsAgain) {
  EXPECT_THROW(fork_join(3, 10,
                         [](int64_t b) {
                           if (b == 7) throw std::runtime_error("block 7");
                         }),
               std::runtime_error);
  // Nested calls run on the calling thread; the pool still serves the next.
  std::atomic<int64_t> sum{0};
  fork_join(2, 4, [&](int64_t b) { fork_join(2, 3, [&](int64_t c) { sum += b * 3 + c; }); });
  EXPECT_EQ(sum.load(), 66);  // 0 + 1 + ... + 11
}

TEST(ForkJoin, HostBlocksCoverTheRangeInChunks) {
  std::vector<std::atomic<int>> hits(1000);
  kdp::detail::host_blocks(kdp::get_default_device(), 3, 1000, 96, [&](int64_t b, int64_t e) {
    EXPECT_LE(e - b, 96);
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "element " << i;
}

// Jobs that follow one another at once (the helpers still looking for the
// next) and after a pause long enough for them to sleep: each is whole, and
// its writes are seen by the caller when fork_join returns.
TEST(ForkJoin, JobsAtOnceAndAfterAPauseAreWhole) {
  std::vector<int64_t> out(256);
  for (int job = 0; job < 40; ++job) {
    if (job % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    fork_join(2, static_cast<int64_t>(out.size()),
              [&](int64_t b) { out[static_cast<size_t>(b)] = job * 1000 + b; });
    for (size_t b = 0; b < out.size(); ++b) {
      ASSERT_EQ(out[b], job * 1000 + static_cast<int64_t>(b)) << "job " << job << ", block " << b;
    }
  }
}
