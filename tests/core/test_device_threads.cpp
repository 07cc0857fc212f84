#include <gtest/gtest.h>

#include <sched.h>

#include <chrono>
#include <condition_variable>
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

namespace {

// Tasks run before on the calling thread.
thread_local int tasks_on_this_thread = 0;

// `n` tasks that each wait (at most 20 s) until all of them have started:
// they finish only if they run at the same time. Task i records its thread,
// how many of these tasks that thread has run, and whether it timed out.
std::vector<std::function<void()>> meeting_tasks(int n, std::vector<std::thread::id>& ids,
                                                 std::vector<int>& runs,
                                                 std::vector<int>& timed_out, std::mutex& m,
                                                 std::condition_variable& cv, int& arrived) {
  ids.assign(static_cast<size_t>(n), std::thread::id());
  runs.assign(static_cast<size_t>(n), 0);
  timed_out.assign(static_cast<size_t>(n), 0);
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < n; ++i) {
    tasks.emplace_back([&, i, n] {
      ids[static_cast<size_t>(i)] = std::this_thread::get_id();
      runs[static_cast<size_t>(i)] = ++tasks_on_this_thread;
      std::unique_lock<std::mutex> lock(m);
      ++arrived;
      cv.notify_all();
      if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return arrived >= n; })) {
        timed_out[static_cast<size_t>(i)] = 1;
      }
    });
  }
  return tasks;
}

}  // namespace

// Replicas that meet (SyncBatchNorm's) need their tasks at the same time, and
// keep their threads, with what those threads cache, from one call to the next.
TEST(DeviceThreads, TasksRunTogetherOnThreadsKeptBetweenCalls) {
  DeviceThreads& threads = Runtime::get().device_threads();
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::thread::id> first, second;
  std::vector<int> runs, late;
  int arrived = 0;
  auto tasks = meeting_tasks(4, first, runs, late, m, cv, arrived);
  tasks.emplace_back([] { throw std::runtime_error("the fifth task failed"); });
  std::vector<std::exception_ptr> errors = threads.run_together(tasks);
  EXPECT_EQ(late, std::vector<int>(4, 0));
  ASSERT_EQ(errors.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_FALSE(errors[i]) << i;
  EXPECT_TRUE(errors[4]);
  arrived = 0;
  errors = threads.run_together(meeting_tasks(4, second, runs, late, m, cv, arrived));
  EXPECT_EQ(late, std::vector<int>(4, 0));
  EXPECT_EQ(first, second);            // the same thread for each task index,
  for (int r : runs) EXPECT_GE(r, 2);  // which ran a task before
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_NE(first[i], std::this_thread::get_id());
    for (size_t j = 0; j < i; ++j) EXPECT_NE(first[i], first[j]);
  }
}

// A task that runs a group of its own (nested replicas) gets threads for it:
// queued behind its own group's tasks, the inner ones would never start.
TEST(DeviceThreads, AGroupInsideAGroupGetsThreadsOfItsOwn) {
  DeviceThreads& threads = Runtime::get().device_threads();
  std::mutex m, inner_m;
  std::condition_variable cv, inner_cv;
  std::vector<std::thread::id> outer_ids, inner_ids;
  std::vector<int> runs, inner_runs, late, inner_late;
  int arrived = 0, inner_arrived = 0;
  std::vector<std::exception_ptr> inner_errors;
  auto tasks = meeting_tasks(2, outer_ids, runs, late, m, cv, arrived);
  tasks[0] = [&, meet = tasks[0]] {
    inner_errors = threads.run_together(
        meeting_tasks(3, inner_ids, inner_runs, inner_late, inner_m, inner_cv, inner_arrived));
    meet();
  };
  const std::vector<std::exception_ptr> errors = threads.run_together(tasks);
  EXPECT_EQ(late, std::vector<int>(2, 0));
  EXPECT_EQ(inner_late, std::vector<int>(3, 0));
  EXPECT_EQ(inner_errors.size(), 3u);
  for (const auto& e : errors) EXPECT_FALSE(e);
  for (const auto& e : inner_errors) EXPECT_FALSE(e);
}
