#include <gtest/gtest.h>

#include <vector>

#include "kdp/core/blas_tuner.hpp"
#include "kdp/core/threads.hpp"

using kdp::BlasThreadTuner;

namespace {

BlasThreadTuner::Options small() {
  BlasThreadTuner::Options o;
  o.window = 3;
  o.period = 4;
  o.warm = 2;
  o.margin = 0.1;
  return o;
}

// The thread counts the tuner returns for steps that take `seconds(count)`
// at the count each runs with.
template <class Seconds>
std::vector<int> run(BlasThreadTuner& tuner, int steps, Seconds seconds) {
  std::vector<int> counts;
  for (int i = 0; i < steps; ++i) counts.push_back(tuner.after_step(seconds(tuner.threads())));
  return counts;
}

}  // namespace

TEST(BlasThreadTuner, KeepsOneThreadWhileItIsFasterAndGoesBackWhenItIsNot) {
  BlasThreadTuner tuner(2, small(), /*apply=*/false);
  ASSERT_TRUE(tuner.active());
  // One thread is faster: 2 warm steps, 3 timed at 2 threads, the change,
  // 1 step not timed, 3 timed at 1 thread; then the period at 1 thread.
  const auto one_faster = [](int n) { return n == 1 ? 0.5 : 1.0; };
  EXPECT_EQ(run(tuner, 9, one_faster), (std::vector<int>{2, 2, 2, 2, 1, 1, 1, 1, 1}));
  EXPECT_EQ(tuner.threads(), 1);
  // Now two threads are: the next comparison times one thread (the count in
  // use) and then two, and keeps two.
  const auto two_faster = [](int n) { return n == 2 ? 0.3 : 0.5; };
  std::vector<int> counts = run(tuner, 12, two_faster);
  EXPECT_EQ(counts.back(), 2);
  EXPECT_EQ(tuner.threads(), 2);
  EXPECT_GT(tuner.steps_on_one_thread(), 0);
  EXPECT_EQ(tuner.steps(), 21);
}

TEST(BlasThreadTuner, StepsThatSlowDownBringTheNextComparisonForward) {
  BlasThreadTuner::Options o = small();
  o.period = 1000;
  BlasThreadTuner tuner(2, o, false);
  // Two threads win the first comparison (steps 1-9), then run for a while.
  run(tuner, 9 + 6, [](int n) { return n == 1 ? 1.6 : 1.0; });
  ASSERT_EQ(tuner.threads(), 2);
  // Two threads' steps now take twice as long: once a window holds more of
  // them than of the earlier steps (the fourth step: the window had two
  // earlier ones), the tuner times one thread, long before the period's
  // 1000 steps are up, and keeps it.
  const std::vector<int> counts = run(tuner, 8, [](int n) { return n == 1 ? 1.6 : 2.0; });
  EXPECT_EQ(counts[2], 2);
  EXPECT_EQ(counts[3], 1);
  EXPECT_EQ(tuner.threads(), 1);
  // Steps 10 % slower than the reference do not.
  BlasThreadTuner steady(2, o, false);
  run(steady, 9, [](int n) { return n == 1 ? 1.6 : 1.0; });
  const std::vector<int> more = run(steady, 30, [](int n) { return n == 1 ? 1.6 : 1.1; });
  EXPECT_EQ(more, std::vector<int>(30, 2));
}

TEST(BlasThreadTuner, TheOtherCountMustWinByTheMargin) {
  BlasThreadTuner tuner(2, small(), false);
  // One thread 5 % faster: not enough; after its window the tuner is back on 2.
  const auto close = [](int n) { return n == 1 ? 0.95 : 1.0; };
  const std::vector<int> counts = run(tuner, 12, close);
  EXPECT_EQ(counts[5], 1);  // timing one thread
  EXPECT_EQ(counts[9], 2);  // decided: two
  EXPECT_EQ(tuner.threads(), 2);
}

TEST(BlasThreadTuner, AnInterruptedStepIsNotTimed) {
  BlasThreadTuner tuner(2, small(), false);
  run(tuner, 3, [](int) { return 1.0; });  // warm, then the first timed step
  // Two steps that followed evaluations (100 s each) do not count: two
  // threads' window is three 1.0 s steps, and one thread's 1.05 s loses.
  // Counted, they would have made two threads' median 100 s.
  for (int i = 0; i < 2; ++i) {
    tuner.interrupted();
    tuner.after_step(100.0);
  }
  run(tuner, 8, [](int n) { return n == 1 ? 1.05 : 1.0; });
  EXPECT_EQ(tuner.threads(), 2);
  EXPECT_EQ(tuner.steps_on_one_thread(), 0);  // timed, never chosen
}

TEST(BlasThreadTuner, OneThreadOrOffMeansNoChange) {
  BlasThreadTuner one(1, small(), false);
  EXPECT_FALSE(one.active());
  BlasThreadTuner::Options off = small();
  off.enabled = false;
  BlasThreadTuner disabled(2, off, false);
  EXPECT_FALSE(disabled.active());
  const auto one_faster = [](int n) { return n == 1 ? 0.1 : 1.0; };
  EXPECT_EQ(run(one, 20, one_faster), std::vector<int>(20, 1));
  EXPECT_EQ(run(disabled, 20, one_faster), std::vector<int>(20, 2));
}

TEST(BlasThreadTuner, SetsItsChoiceInTheBlasAndTheRanksCountBackAtTheEnd) {
  kdp::ScopedBlasThreads two(2);
  if (kdp::blas_threads() != 2) GTEST_SKIP() << "this BLAS's thread count cannot be set";
  {
    BlasThreadTuner tuner(2, small(), /*apply=*/true);
    run(tuner, 9, [](int n) { return n == 1 ? 0.5 : 1.0; });
    ASSERT_EQ(tuner.threads(), 1);
    EXPECT_EQ(kdp::blas_threads(), 1);
  }
  EXPECT_EQ(kdp::blas_threads(), 2);
}
