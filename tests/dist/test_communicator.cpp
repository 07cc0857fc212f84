#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;
using namespace kdp::dist;

TEST(Communicator, AllreduceBroadcastAllgatherOnTensors) {
  Communicator comm = Communicator::world();
  const int r = comm.rank(), n = comm.size();
  Tensor t = Tensor::full({3}, static_cast<float>(r + 1));
  comm.allreduce(t, ReduceOp::Sum);
  EXPECT_EQ(t.to_vector(), std::vector<float>(3, n * (n + 1) / 2.0f));

  Tensor a = Tensor::full({2}, static_cast<float>(r + 1));
  comm.allreduce(a, ReduceOp::Average);
  EXPECT_FLOAT_EQ(a.to_vector()[0], (n + 1) / 2.0f);

  Tensor m = Tensor::full({2}, static_cast<float>(r));
  comm.allreduce(m, ReduceOp::Max);
  EXPECT_EQ(m.to_vector(), std::vector<float>(2, static_cast<float>(n - 1)));

  Tensor b = Tensor::full({4}, r == 0 ? 42.0f : -1.0f);
  comm.broadcast(b, 0);
  EXPECT_EQ(b.to_vector(), std::vector<float>(4, 42.0f));

  Tensor g = comm.allgather(Tensor::full({1, 2}, static_cast<float>(r)));
  EXPECT_EQ(g.shape(), Shape({n, 2}));
  const auto gv = g.to_vector();
  for (int k = 0; k < n; ++k) EXPECT_EQ(gv[static_cast<size_t>(2 * k)], static_cast<float>(k));
}

TEST(Communicator, NonBlockingAndRawBuffers) {
  Communicator comm = Communicator::world();
  const int n = comm.size();
  Tensor t = Tensor::ones({1000});
  Request req = comm.iallreduce(t, ReduceOp::Sum);
  req.wait();
  EXPECT_TRUE(req.done());
  EXPECT_EQ(t.to_vector()[999], static_cast<float>(n));

  std::vector<double> d{1.5, 2.5};
  comm.allreduce(d.data(), d.size(), ReduceOp::Sum);
  EXPECT_DOUBLE_EQ(d[1], 2.5 * n);
  std::vector<int64_t> i{comm.rank()};
  comm.allreduce(i.data(), 1, ReduceOp::Max);
  EXPECT_EQ(i[0], n - 1);

  const std::string mine(static_cast<size_t>(comm.rank() + 1), 'x');
  const auto all = comm.allgather_bytes(mine.data(), mine.size());
  ASSERT_EQ(all.size(), static_cast<size_t>(n));
  for (int k = 0; k < n; ++k)
    EXPECT_EQ(all[static_cast<size_t>(k)].size(), static_cast<size_t>(k + 1));
  comm.barrier();
  EXPECT_THROW(comm.broadcast(t, n), ValueError);
}

// The two halves together are an allreduce: every element's sum reaches every
// rank, whichever rank completed it; lengths below, at and above the number
// of ranks (empty parts). The parts tile the buffer.
TEST(Communicator, ReduceScatterThenAllgatherPartsIsASum) {
  Communicator comm = Communicator::world();
  const int r = comm.rank(), n = comm.size();
  for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(n), size_t{1000}}) {
    std::vector<double> d(count);
    for (size_t i = 0; i < count; ++i) d[i] = (r + 1) * 1000.0 + static_cast<double>(i) + 0.25;
    const Part part = comm.reduce_scatter(d.data(), count);
    ASSERT_LE(part.begin + part.length, count);
    std::vector<float> f(count, -1.0f);
    for (size_t i = part.begin; i < part.begin + part.length; ++i) {
      // sum over ranks k of (k + 1) 1000 + i + 0.25
      EXPECT_EQ(d[i], 1000.0 * n * (n + 1) / 2 + n * (static_cast<double>(i) + 0.25)) << i;
      f[i] = static_cast<float>(d[i]);
    }
    std::vector<int64_t> covered(count, 0);
    for (size_t i = part.begin; i < part.begin + part.length; ++i) covered[i] = 1;
    comm.allreduce(covered.data(), count, ReduceOp::Sum);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(covered[i], 1) << "element " << i << " of " << count;
    comm.allgather_parts(f.data(), count);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(f[i], static_cast<float>(1000.0 * n * (n + 1) / 2 + n * (i + 0.25))) << i;
    }
  }
}
