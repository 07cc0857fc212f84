#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <numeric>

#include "test_util.hpp"

using namespace kdp;

TEST(Tensor, FactoriesFillValues) {
  EXPECT_EQ(Tensor::zeros({2, 3}).to_vector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(Tensor::ones({4}).to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(Tensor::full({2, 2}, 2.5f).to_vector(), std::vector<float>(4, 2.5f));
  EXPECT_EQ(Tensor::arange(4).to_vector(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_FLOAT_EQ(Tensor::scalar(3.0f).item(), 3.0f);
  const std::vector<float> v{1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::from_host(v, {2, 3});
  EXPECT_EQ(t.to_vector(), v);
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.device(), get_default_device());
}

TEST(Tensor, FromHostRejectsWrongCount) {
  EXPECT_THROW(Tensor::from_host(std::vector<float>{1, 2, 3}, {2, 2}), ShapeError);
}

TEST(Tensor, ItemNeedsOneElement) {
  EXPECT_THROW(Tensor::zeros({2}).item(), ShapeError);
  EXPECT_FLOAT_EQ(Tensor::full({1, 1}, 7.0f).item(), 7.0f);
}

TEST(Tensor, RandnHasStandardMoments) {
  Tensor t = Tensor::randn({20000});
  const auto v = t.to_vector();
  double m = 0, m2 = 0;
  for (float x : v) {
    m += x;
    m2 += static_cast<double>(x) * x;
  }
  m /= static_cast<double>(v.size());
  m2 /= static_cast<double>(v.size());
  // Standard errors: 1/sqrt(20000) = 0.007 for the mean, ~0.01 for the variance.
  EXPECT_NEAR(m, 0.0, 0.04);
  EXPECT_NEAR(m2 - m * m, 1.0, 0.05);
}

TEST(Tensor, RandIsUniformInRangeAndSeedable) {
  manual_seed(123);
  const auto a = Tensor::rand({1000}, get_default_device(), -2.0f, 3.0f).to_vector();
  for (float x : a) {
    EXPECT_GE(x, -2.0f);
    EXPECT_LT(x, 3.0f);
  }
  manual_seed(123);
  const auto b = Tensor::rand({1000}, get_default_device(), -2.0f, 3.0f).to_vector();
  EXPECT_EQ(a, b);  // same seed, same numbers
  const auto c = Tensor::rand({1000}, get_default_device(), -2.0f, 3.0f).to_vector();
  EXPECT_NE(a, c);  // the generator moved on
  EXPECT_THROW(Tensor::rand({2}, get_default_device(), 1.0f, 1.0f), ValueError);
}

TEST(Tensor, ReshapeSharesMemoryAndInfersOneDimension) {
  Tensor t = Tensor::arange(12);
  Tensor r = t.reshape({3, -1});
  EXPECT_EQ(r.shape(), Shape({3, 4}));
  EXPECT_TRUE(r.shares_storage(t));
  EXPECT_THROW(t.reshape({5, -1}), ShapeError);
  EXPECT_THROW(t.reshape({2, 5}), ShapeError);
  EXPECT_THROW(t.reshape({-1, -1}), ShapeError);
}

TEST(Tensor, SliceAlongFirstDimensionIsAView) {
  Tensor t = Tensor::arange(12).reshape({4, 3});
  Tensor s = t.slice(0, 1, 3);
  EXPECT_TRUE(s.shares_storage(t));
  EXPECT_EQ(s.to_vector(), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  Tensor c = t.slice(1, 1, 2);
  EXPECT_FALSE(c.shares_storage(t));
  EXPECT_EQ(c.to_vector(), (std::vector<float>{1, 4, 7, 10}));
  EXPECT_THROW(t.slice(0, 2, 5), ShapeError);
  EXPECT_THROW(t.slice(2, 0, 1), ShapeError);
}

TEST(Tensor, ChunkFollowsTorchChunk) {
  // ceil(B / n) rows per chunk, the last one smaller, fewer chunks when B is small.
  struct Case {
    int64_t b;
    int n;
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {{5, 4, {2, 2, 1}},    {36, 7, {6, 6, 6, 6, 6, 6}},
                                   {8, 4, {2, 2, 2, 2}}, {1, 3, {1}},
                                   {7, 2, {4, 3}},       {3, 3, {1, 1, 1}}};
  for (const auto& c : cases) {
    Tensor t = Tensor::arange(c.b * 2).reshape({c.b, 2});
    auto pieces = t.chunk(c.n, 0);
    ASSERT_EQ(pieces.size(), c.sizes.size()) << "B=" << c.b << " n=" << c.n;
    int64_t row = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      EXPECT_EQ(pieces[k].size(0), c.sizes[k]);
      EXPECT_FLOAT_EQ(pieces[k].to_vector()[0], static_cast<float>(row * 2));
      row += c.sizes[k];
    }
  }
  EXPECT_THROW(Tensor::zeros({4}).chunk(0), ValueError);
}

TEST(Tensor, CatRoundTripsChunkAlongEveryDimension) {
  Tensor t = test::random_tensor({4, 6, 5}, 1);
  for (int dim = 0; dim < 3; ++dim) {
    Tensor back = cat(t.chunk(3, dim), dim);
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(back.to_vector(), t.to_vector()) << "dim " << dim;
  }
}

TEST(Tensor, CatRejectsMismatchedShapes) {
  try {
    cat({Tensor::zeros({2, 3}), Tensor::zeros({2, 4})}, 0);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cat({}, 0), ValueError);
}

TEST(Tensor, InPlaceWritesBumpTheVersion) {
  Tensor t = Tensor::zeros({3});
  const uint64_t v0 = t.version();
  t.fill_(2.0f);
  t.add_(Tensor::ones({3}), 0.5f);
  t.mul_(2.0f);
  EXPECT_EQ(t.to_vector(), std::vector<float>(3, 5.0f));
  EXPECT_EQ(t.version(), v0 + 3);
  Tensor u = Tensor::zeros({3});
  u.copy_(t);
  EXPECT_EQ(u.to_vector(), t.to_vector());
  EXPECT_THROW(u.copy_(Tensor::zeros({4})), ShapeError);
  EXPECT_THROW(u.add_(Tensor::zeros({4})), ShapeError);
}

TEST(Tensor, UndefinedTensorReportsUse) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_THROW(t.shape(), StateError);
  EXPECT_THROW(t.to_vector(), StateError);
}

TEST(Tensor, RequiresGradOnlyOnLeaves) {
  Tensor a = Tensor::ones({2});
  a.requires_grad_();
  Tensor b = a * 2.0f;
  EXPECT_FALSE(b.is_leaf());
  EXPECT_THROW(b.requires_grad_(false), StateError);
  Tensor d = b.detach();
  EXPECT_TRUE(d.is_leaf());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage(b));
}

TEST(Tensor, SetGradChecksShape) {
  Tensor a = Tensor::ones({2, 2});
  EXPECT_THROW(a.set_grad(Tensor::ones({4})), ShapeError);
  a.set_grad(Tensor::ones({2, 2}));
  EXPECT_TRUE(a.grad().defined());
}

TEST(Tensor, NameAppearsInDescriptions) {
  Tensor w = Tensor::zeros({3, 2});
  w.set_name("fc1.weight");
  EXPECT_EQ(w.describe(), "tensor 'fc1.weight' [3, 2]");
}

TEST(Tensor, ToSameDeviceIsIdentity) {
  Tensor a = Tensor::ones({2});
  Tensor b = a.to(a.device());
  EXPECT_TRUE(b.is_same(a));
}

TEST(Tensor, AllocationsWhoseSizeOverflowsAreRefusedBeforeAllocating) {
  const AllocatorStats before = Runtime::get().allocator().stats();
  EXPECT_THROW(Tensor::empty({784, int64_t{1} << 62}), ShapeError);
  EXPECT_THROW(Tensor::rand({784, int64_t{1} << 62}), ShapeError);
  EXPECT_THROW(Storage(size_t{1} << 62, get_default_device()), ShapeError);
  EXPECT_THROW(Storage(SIZE_MAX, get_default_device(), "kdp::test"), ShapeError);
  const AllocatorStats after = Runtime::get().allocator().stats();
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.dedicated_allocations, before.dedicated_allocations);
}

TEST(Device, MemoryCapacityIsPositiveAndBoundedByThePhysicalMemory) {
  const size_t capacity = get_default_device().memory_capacity();
  EXPECT_GT(capacity, size_t{1} << 26);  // any machine that runs these tests
  if (compat::host_accessible_memory()) {
    const auto physical =
        static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    EXPECT_LE(capacity, physical);
  }
}
