#include <gtest/gtest.h>

#include <thread>

#include "kdp/kdp.hpp"

using namespace kdp;

// The guards of grad mode, autocast and per-sample draws write the calling
// thread's one context, and an ExecutionScope installs a whole context and
// gives the thread its own back.
TEST(ExecutionContext, GuardsWriteTheThreadsContextAndScopesRestoreIt) {
  const ExecutionContext before = ExecutionContext::current();
  ASSERT_TRUE(before.grad_enabled);
  ASSERT_EQ(before.precision, Precision::fp32);
  ExecutionContext inside;
  {
    NoGradGuard no_grad;
    autocast bf16(Precision::bf16);
    SampleDraws draws(3, {1, 2});
    inside = ExecutionContext::current();
    EXPECT_FALSE(inside.grad_enabled);
    EXPECT_EQ(inside.precision, Precision::bf16);
    EXPECT_EQ(inside.sample_draws, &draws);
    EXPECT_EQ(SampleDraws::active(), &draws);
  }
  EXPECT_TRUE(autograd::GradMode::enabled());
  EXPECT_EQ(autocast_precision(), Precision::fp32);
  EXPECT_EQ(SampleDraws::active(), nullptr);

  inside.sample_draws = nullptr;  // the draws are gone
  {
    ExecutionScope scope(inside);
    EXPECT_FALSE(autograd::GradMode::enabled());
    EXPECT_EQ(autocast_precision(), Precision::bf16);
    NoGradGuard nested;  // a guard inside a scope restores to the scope's context
  }
  EXPECT_TRUE(autograd::GradMode::enabled());
  EXPECT_EQ(autocast_precision(), Precision::fp32);
}

// A thread of the program's own starts with the defaults: nothing crosses
// unless it is carried.
TEST(ExecutionContext, ANewThreadStartsWithTheDefaults) {
  NoGradGuard no_grad;
  autocast bf16(Precision::bf16);
  ExecutionContext plain, carried;
  const ExecutionContext mine = ExecutionContext::current();
  std::thread([&] { plain = ExecutionContext::current(); }).join();
  std::thread([&] {
    ExecutionScope scope(mine);
    carried = ExecutionContext::current();
  }).join();
  EXPECT_TRUE(plain.grad_enabled);
  EXPECT_EQ(plain.precision, Precision::fp32);
  EXPECT_FALSE(carried.grad_enabled);
  EXPECT_EQ(carried.precision, Precision::bf16);
}
