#include <gtest/gtest.h>

#include <sched.h>

#include <mutex>
#include <stdexcept>
#include <thread>

#include "kdp/core/threads.hpp"
#include "test_util.hpp"

using namespace kdp;

TEST(DeviceThreads, TasksOfOneInstanceRunInOrderAndKeepTheirErrors) {
  const Device d = get_default_device();
  std::vector<int> order;
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 3; ++i) {
    tasks.emplace_back([&order, i] {
      order.push_back(i);
      if (i == 1) throw std::runtime_error("task 1 failed");
    });
  }
  const auto errors = Runtime::get().device_threads().run(tasks, {d, d, d}, true);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_FALSE(errors[0]);
  EXPECT_TRUE(errors[1]);
  EXPECT_FALSE(errors[2]);
}

// Instances running at once share the rank's BLAS threads, and get them back after.
TEST(DeviceThreads, ConcurrentInstancesShareTheBlasThreads) {
  if (!devices_concurrent(2)) GTEST_SKIP() << "this backend gives no concurrent instances";
  // A GEMM first: it links this program to the BLAS library (and loads it).
  Tensor product = matmul(Tensor::ones({2, 2}), Tensor::ones({2, 2}));
  ASSERT_EQ(product.to_vector(), std::vector<float>(4, 2.0f));
  const int before = blas_threads();
  if (!set_blas_threads(2)) GTEST_SKIP() << "the BLAS library cannot be told its thread count";
  const std::vector<Device> devs = devices(2);
  std::mutex m;
  std::vector<int> seen;
  std::vector<std::function<void()>> tasks(2, [&] {
    const int n = blas_threads();
    std::lock_guard<std::mutex> lock(m);
    seen.push_back(n);
  });
  const auto errors = Runtime::get().device_threads().run(tasks, devs, true);
  EXPECT_FALSE(errors[0]);
  EXPECT_FALSE(errors[1]);
  EXPECT_EQ(seen, (std::vector<int>{1, 1}));
  EXPECT_EQ(blas_threads(), 2);
  set_blas_threads(before);
}

// A background thread (the loader's prefetch thread) takes the policy whose
// wake-ups do not preempt the running thread; the threads around it keep
// theirs.
TEST(DeviceThreads, ABackgroundThreadGivesWayToTheComputeThreads) {
#if defined(__linux__)
  int policy = -1;
  bool made = false;
  std::thread t([&] {
    made = make_background_thread();
    policy = sched_getscheduler(0);
  });
  t.join();
  EXPECT_TRUE(made);
  EXPECT_EQ(policy, SCHED_BATCH);
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
#else
  GTEST_SKIP() << "no SCHED_BATCH outside Linux";
#endif
}
