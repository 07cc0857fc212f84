#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "test_util.hpp"

using namespace kdp;

namespace {

// Features of sample i are all i, so a batch shows which samples it holds.
std::shared_ptr<data::TensorDataset> numbered(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n * 3)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) x[static_cast<size_t>(i * 3 + j)] = static_cast<float>(i);
    y[static_cast<size_t>(i)] = static_cast<float>(i % 5);
  }
  return std::make_shared<data::TensorDataset>(x, Shape{3}, y, Shape{}, 5);
}

std::vector<int64_t> epoch_order(data::DataLoader& loader) {
  std::vector<int64_t> seen;
  for (data::Batch& b : loader) {
    const auto f = b.features.to_vector();
    EXPECT_EQ(b.features.size(1), 3);
    for (int64_t k = 0; k < b.features.size(0); ++k) {
      seen.push_back(static_cast<int64_t>(f[static_cast<size_t>(k * 3)]));
      EXPECT_EQ(seen.back(), b.indices[static_cast<size_t>(k)]);
    }
  }
  return seen;
}

// Fails on the sample with index `bad`.
class FailingDataset : public data::TensorDataset {
 public:
  explicit FailingDataset(int64_t bad) : TensorDataset(*numbered(50)), bad_(bad) {}
  void fetch(const std::vector<int64_t>& idx, float* f, float* l) const override {
    for (int64_t i : idx) {
      if (i == bad_) throw IOError("sample " + std::to_string(i) + " is unreadable");
    }
    TensorDataset::fetch(idx, f, l);
  }

 private:
  int64_t bad_;
};

}  // namespace

TEST(DataLoader, EverySampleOnceInTheSamplersOrder) {
  auto ds = numbered(103);
  for (int prefetch : {0, 2}) {
    auto sampler = std::make_shared<data::RandomSampler>(103, 5);
    data::DataLoaderOptions o;
    o.batch_size = 10;
    o.prefetch = prefetch;
    data::DataLoader loader(ds, sampler, o);
    EXPECT_EQ(loader.num_batches(), 11);
    EXPECT_EQ(epoch_order(loader), sampler->indices());
  }
}

TEST(DataLoader, SameSeedSameBatchesAndEpochsDiffer) {
  auto ds = numbered(64);
  auto make = [&](int prefetch) {
    data::DataLoaderOptions o;
    o.batch_size = 8;
    o.prefetch = prefetch;
    return std::make_unique<data::DataLoader>(ds, std::make_shared<data::RandomSampler>(64, 11), o);
  };
  auto a = make(2), b = make(2), c = make(0);
  const auto first = epoch_order(*a);
  EXPECT_EQ(first, epoch_order(*b));
  EXPECT_EQ(first, epoch_order(*c));  // prefetch on or off: the same batches
  a->set_epoch(1);
  EXPECT_NE(epoch_order(*a), first);
  a->set_epoch(0);
  EXPECT_EQ(epoch_order(*a), first);
}

TEST(DataLoader, DropLastAndStartBatch) {
  auto ds = numbered(25);
  data::DataLoaderOptions o;
  o.batch_size = 10;
  o.drop_last = true;
  auto sampler = std::make_shared<data::SequentialSampler>(25);
  data::DataLoader loader(ds, sampler, o);
  EXPECT_EQ(loader.num_batches(), 2);
  EXPECT_EQ(epoch_order(loader).size(), 20u);
  loader.set_start_batch(1);  // resume after the first batch
  const auto rest = epoch_order(loader);
  ASSERT_EQ(rest.size(), 10u);
  EXPECT_EQ(rest[0], 10);
  EXPECT_EQ(epoch_order(loader).size(), 20u);  // applies once
}

TEST(DataLoader, TwoRanksTogetherSeeTheWholeDataset) {
  auto ds = numbered(37);
  std::multiset<int64_t> all;
  for (int rank = 0; rank < 2; ++rank) {
    data::DistributedSamplerOptions so;
    so.exact = true;
    data::DataLoaderOptions o;
    o.batch_size = 4;
    data::DataLoader loader(ds, std::make_shared<data::DistributedSampler>(37, 2, rank, so), o);
    for (int64_t i : epoch_order(loader)) all.insert(i);
  }
  ASSERT_EQ(all.size(), 37u);
  for (int64_t i = 0; i < 37; ++i) EXPECT_EQ(all.count(i), 1u);
}

TEST(DataLoader, ReaderErrorsReachTheTrainingThreadAtTheirBatch) {
  for (int prefetch : {0, 3}) {
    auto ds = std::make_shared<FailingDataset>(33);
    data::DataLoaderOptions o;
    o.batch_size = 10;
    o.prefetch = prefetch;
    data::DataLoader loader(ds, std::make_shared<data::SequentialSampler>(50), o);
    int batches = 0;
    try {
      for (data::Batch& b : loader) {
        (void)b;
        ++batches;
      }
      FAIL() << "expected IOError";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("sample 33"), std::string::npos);
    }
    EXPECT_EQ(batches, 3);  // batches 0..2 arrived; batch 3 holds sample 33
  }
}

TEST(DataLoader, LeavingALoopEarlyThenStartingAgain) {
  auto ds = numbered(100);
  data::DataLoaderOptions o;
  o.batch_size = 5;
  data::DataLoader loader(ds, std::make_shared<data::SequentialSampler>(100), o);
  for (data::Batch& b : loader) {
    EXPECT_EQ(b.indices[0], 0);
    break;
  }
  EXPECT_EQ(epoch_order(loader).size(), 100u);
}

TEST(DataLoader, RejectsBadOptions) {
  auto ds = numbered(10);
  data::DataLoaderOptions o;
  o.batch_size = 0;
  EXPECT_THROW(data::DataLoader(ds, std::make_shared<data::SequentialSampler>(10), o), ValueError);
}

// Per-channel moments in one pass over every sample (blocks combined without
// cancellation: channels far from zero keep their spread), applied to each
// batch on its device and inverted back; class labels are never standardised.
TEST(ChannelNormalisation, MomentsOfEveryChannelAppliedOnTheDevice) {
  const int64_t n = 300;
  std::vector<float> x(static_cast<size_t>(n * 2 * 3)), y(static_cast<size_t>(n));
  std::mt19937_64 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t j = 0; j < 3; ++j) {
      x[static_cast<size_t>(s * 6 + j)] = 10000.0f + 2.0f * normal(gen);   // channel 0
      x[static_cast<size_t>(s * 6 + 3 + j)] = -0.5f + 0.1f * normal(gen);  // channel 1
    }
    y[static_cast<size_t>(s)] = 50.0f + 4.0f * normal(gen);
  }
  auto set = std::make_shared<data::TensorDataset>(x, kdp::Shape{2, 3}, y, kdp::Shape{});
  const data::ChannelNormalisation f = data::channel_moments(*set, false),
                                   t = data::channel_moments(*set, true);
  ASSERT_EQ(f.mean.size(), 2u);
  EXPECT_EQ(f.channel_size, 3);
  for (int c = 0; c < 2; ++c) {  // against two passes in double
    double mean = 0, spread = 0;
    for (int64_t s = 0; s < n; ++s)
      for (int64_t j = 0; j < 3; ++j) mean += x[static_cast<size_t>(s * 6 + c * 3 + j)];
    mean /= 3.0 * n;
    for (int64_t s = 0; s < n; ++s)
      for (int64_t j = 0; j < 3; ++j) {
        const double d = x[static_cast<size_t>(s * 6 + c * 3 + j)] - mean;
        spread += d * d;
      }
    EXPECT_NEAR(f.mean[static_cast<size_t>(c)], mean, 1e-6 * std::fabs(mean));
    EXPECT_NEAR(f.stddev[static_cast<size_t>(c)], std::sqrt(spread / (3.0 * n)), 1e-4);
  }
  ASSERT_EQ(t.mean.size(), 1u);
  data::DataLoaderOptions o;
  o.batch_size = n;
  o.normalise_features = f;
  o.normalise_targets = t;
  data::DataLoader loader(set, std::make_shared<data::SequentialSampler>(n), o);
  auto first = loader.begin();
  const data::Batch& b = *first;
  const std::vector<float> v = b.features.to_vector(), lv = b.labels.to_vector();
  for (int c = 0; c < 2; ++c) {
    double mean = 0, sq = 0;
    for (int64_t s = 0; s < n; ++s)
      for (int64_t j = 0; j < 3; ++j) {
        const double e = v[static_cast<size_t>(s * 6 + c * 3 + j)];
        mean += e / (3.0 * n);
        sq += e * e / (3.0 * n);
      }
    EXPECT_NEAR(mean, 0.0, 1e-3) << c;
    EXPECT_NEAR(sq, 1.0, 1e-2) << c;
  }
  const kdp::Tensor back = b.labels.clone();
  t.invert(back);
  kdp::test::expect_close(back.to_vector(), y, 1e-5, 1e-3, "targets back in their units");
  auto classes = data::synthetic_classification(20, 4, 3, 1);
  data::DataLoaderOptions bad;
  bad.normalise_targets = t;
  EXPECT_THROW(data::DataLoader(classes, std::make_shared<data::SequentialSampler>(20), bad),
               ValueError);
}
