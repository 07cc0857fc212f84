#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kdp/kdp.hpp"

using namespace kdp::data;

TEST(Sampler, SequentialAndRandom) {
  EXPECT_EQ(SequentialSampler(4).indices(), (std::vector<int64_t>{0, 1, 2, 3}));
  RandomSampler r(100, 7);
  auto a = r.indices();
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, SequentialSampler(100).indices());  // a permutation
  EXPECT_EQ(r.indices(), a);                            // same seed and epoch: same order
  r.set_epoch(1);
  EXPECT_NE(r.indices(), a);  // another epoch: another order
}

TEST(DistributedSampler, PadsLikePyTorch) {
  // 10 samples on 3 ranks, no shuffle: 4 each, padded with the first 2 indices.
  DistributedSamplerOptions o;
  o.shuffle = false;
  EXPECT_EQ(DistributedSampler(10, 3, 0, o).indices(), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(DistributedSampler(10, 3, 1, o).indices(), (std::vector<int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(DistributedSampler(10, 3, 2, o).indices(), (std::vector<int64_t>{2, 5, 8, 1}));
  // More ranks than samples: the list is repeated as often as needed.
  EXPECT_EQ(DistributedSampler(2, 5, 4, o).indices(), (std::vector<int64_t>{0}));
  // drop_last: ceil((10 - 3) / 3) = 3 each, the tail dropped.
  o.drop_last = true;
  EXPECT_EQ(DistributedSampler(10, 3, 2, o).indices(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(DistributedSampler(2, 3, 0, o).size(), 0);
}

TEST(DistributedSampler, ExactModeCountsEverySampleOnce) {
  for (int64_t n : {10, 11, 12, 1, 0}) {
    for (int ranks : {1, 2, 3, 4}) {
      DistributedSamplerOptions o;
      o.exact = true;
      o.seed = 3;
      std::multiset<int64_t> seen;
      int64_t total = 0;
      for (int r = 0; r < ranks; ++r) {
        DistributedSampler s(n, ranks, r, o);
        s.set_epoch(2);
        const auto idx = s.indices();
        EXPECT_EQ(static_cast<int64_t>(idx.size()), s.size());
        total += s.size();
        seen.insert(idx.begin(), idx.end());
      }
      EXPECT_EQ(total, n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen.count(i), 1u) << n << " on " << ranks;
    }
  }
}

TEST(DistributedSampler, ShufflesBySeedAndEpoch) {
  DistributedSampler a(50, 2, 0), b(50, 2, 0);
  EXPECT_EQ(a.indices(), b.indices());
  b.set_epoch(1);
  EXPECT_NE(a.indices(), b.indices());
  DistributedSamplerOptions o;
  o.seed = 9;
  EXPECT_NE(DistributedSampler(50, 2, 0, o).indices(), a.indices());
  // Default mode: every rank gets the same count, and together they cover all.
  std::set<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(50, 3, r);
    EXPECT_EQ(s.size(), 17);
    for (auto i : s.indices()) all.insert(i);
  }
  EXPECT_EQ(all.size(), 50u);
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), kdp::ValueError);
  EXPECT_THROW(DistributedSampler(-1, 2, 0), kdp::ValueError);
  DistributedSamplerOptions o;
  o.exact = true;
  o.drop_last = true;
  EXPECT_THROW(DistributedSampler(10, 2, 0, o), kdp::ValueError);
}

// A held-out split: every sample in exactly one part, the parts' sizes as
// asked, the same parts for the same seed and other ones for another seed.
TEST(HoldoutSplit, EverySampleInOnePartDrawnBySeed) {
  const HoldoutSplit a = holdout_split(1000, 0.1, 7);
  EXPECT_EQ(a.held_out.size(), 100u);
  EXPECT_EQ(a.train.size(), 900u);
  std::vector<int64_t> all = a.train;
  all.insert(all.end(), a.held_out.begin(), a.held_out.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(all[static_cast<size_t>(i)], i);
  EXPECT_TRUE(std::is_sorted(a.held_out.begin(), a.held_out.end()));
  EXPECT_EQ(holdout_split(1000, 0.1, 7).held_out, a.held_out);
  EXPECT_NE(holdout_split(1000, 0.1, 8).held_out, a.held_out);
  // Not simply the first or last tenth.
  EXPECT_LT(a.held_out.front(), 100);
  EXPECT_GT(a.held_out.back(), 900);
  EXPECT_THROW(holdout_split(1000, 0.0, 7), kdp::ValueError);
  EXPECT_THROW(holdout_split(1000, 1.0, 7), kdp::ValueError);
  EXPECT_THROW(holdout_split(3, 0.1, 7), kdp::ValueError);  // nothing held out
}

TEST(Subset, FetchesTheChosenSamplesOfItsDataset) {
  auto base = synthetic_regression(10, 3, 2, 4);
  Subset sub(base, {7, 2, 9});
  EXPECT_EQ(sub.size(), 3);
  EXPECT_EQ(sub.sample_shape(), base->sample_shape());
  std::vector<float> x(2 * 3), y(2 * 2), bx(2 * 3), by(2 * 2);
  sub.fetch({2, 0}, x.data(), y.data());
  base->fetch({9, 7}, bx.data(), by.data());
  EXPECT_EQ(x, bx);
  EXPECT_EQ(y, by);
  EXPECT_THROW(sub.fetch({3}, x.data(), y.data()), kdp::ValueError);
  EXPECT_THROW(Subset(base, {10}), kdp::ValueError);
}
