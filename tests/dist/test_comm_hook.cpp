#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "dist_test_util.hpp"
#include "test_util.hpp"

using namespace kdp;
using namespace kdp::dist;

namespace {

// bfloat16's rounding (nearest, ties to even), written out independently of
// the library: the closest float with 8 significant bits.
float bf16(float v) {
  if (v == 0.0f || !std::isfinite(v)) return v;
  int e = 0;
  const double m = std::frexp(static_cast<double>(v), &e);  // v = m 2^e, 0.5 <= |m| < 1
  const double scaled = m * 256.0;                          // 8 significant bits
  double r = std::nearbyint(scaled);                        // ties to even
  return static_cast<float>(std::ldexp(r / 256.0, e));
}

// Rank r's value at i: small integers and halves, so that every sum is exact.
float value(int r, size_t i) {
  return static_cast<float>((static_cast<int>(i) * 7 + r * 13) % 23) * 0.5f - 5.0f;
}

}  // namespace

// The ring, through the bfloat16 route on values that bfloat16 holds exactly
// (so are their sums): every length and operation gives the exact result.
TEST(CommHook, RingAllreduceIsExactForEveryLengthAndOperation) {
  Communicator comm = Communicator::world();
  const int n = comm.size();
  // Lengths below, at and above the number of ranks (empty ring segments).
  for (size_t count : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{1000}, size_t{4099}}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Average}) {
      std::vector<float> x(count);
      for (size_t i = 0; i < count; ++i) x[i] = value(comm.rank(), i);
      Tensor t = Tensor::from_host(x, {static_cast<int64_t>(count)});
      comm.iallreduce(t, op, AllreduceRoute{true, false}).wait();
      std::vector<float> plain = x;
      comm.allreduce(plain.data(), count, op);
      const std::vector<float> got = t.to_vector();
      for (size_t i = 0; i < count; ++i) {
        float want = value(0, i);
        for (int r = 1; r < n; ++r) {
          const float v = value(r, i);
          want = op == ReduceOp::Max   ? std::max(want, v)
                 : op == ReduceOp::Min ? std::min(want, v)
                                       : want + v;
        }
        if (op == ReduceOp::Average) want = static_cast<float>(want * (1.0 / n));
        ASSERT_EQ(got[i], want) << "ring " << to_string(op) << " of " << count << " at " << i;
        ASSERT_EQ(plain[i], want) << "plain " << to_string(op) << " of " << count << " at " << i;
      }
    }
  }
}

TEST(CommHook, Bfloat16RouteRoundsOnceAndAgreesOnEveryRank) {
  Communicator comm = Communicator::world();
  const int n = comm.size();
  Tensor t = test::random_tensor({5003}, 40 + static_cast<uint64_t>(comm.rank()));
  const std::vector<float> mine = t.to_vector();
  std::vector<float> exact = mine;
  comm.allreduce(exact.data(), exact.size(), ReduceOp::Sum);
  comm.iallreduce(t, ReduceOp::Sum, AllreduceRoute{true, false}).wait();
  const std::vector<float> got = t.to_vector();
  test::expect_same_on_every_rank(comm, got, "bf16 sum");
  for (size_t i = 0; i < got.size(); ++i) {
    if (n == 1) {
      ASSERT_EQ(got[i], mine[i]) << "a single rank sends nothing and rounds nothing";
      continue;
    }
    // Each of the n - 1 partial sums crossing the network and the result is
    // rounded once: a relative error of 2^-9 each, on values of at most n.
    ASSERT_EQ(got[i], bf16(got[i])) << "the result is a bfloat16 value, at " << i;
    ASSERT_NEAR(got[i], exact[i], n * n * std::ldexp(1.0, -8)) << i;
  }
}

TEST(CommHook, TrafficIsTheRingsClosedForm) {
  Communicator comm = Communicator::world();
  const int n = comm.size();
  const size_t count = 6000;  // divisible by 1, 2 and 3 ranks
  for (bool half : {false, true}) {
    const Traffic before = comm.traffic();
    Tensor t = Tensor::ones({static_cast<int64_t>(count)});
    comm.iallreduce(t, ReduceOp::Sum, AllreduceRoute{half, false}).wait();
    const Traffic after = comm.traffic();
    const uint64_t sent =
        (after.between_nodes - before.between_nodes) + (after.within_node - before.within_node);
    // 2 (n - 1) steps, each sending one of n equal segments; float32 inside
    // one node goes through MPI's own allreduce, counted as the ring would.
    const uint64_t want = 2 * static_cast<uint64_t>(n - 1) * (count / static_cast<size_t>(n)) *
                          (half ? sizeof(uint16_t) : sizeof(float));
    EXPECT_EQ(sent, want) << (half ? "bf16" : "float32");
    EXPECT_EQ(t.to_vector()[count - 1], static_cast<float>(n)) << "sums of ones are exact";
  }
}

TEST(CommHook, HierarchicalRouteEqualsThePlainSum) {
  Communicator comm = Communicator::world();
  std::vector<float> plain(999), nodes(999);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = nodes[i] = value(comm.rank(), i);
  comm.allreduce(plain.data(), plain.size(), ReduceOp::Sum);
  Tensor t = Tensor::from_host(nodes, {999});
  comm.iallreduce(t, ReduceOp::Sum, AllreduceRoute{false, true}).wait();
  EXPECT_EQ(t.to_vector(), plain) << comm.nodes() << " node(s), " << comm.local_size()
                                  << " rank(s) on this one";
  EXPECT_GE(comm.nodes(), 1);
  EXPECT_LE(comm.local_size(), comm.size());
}

// Where each request went (AllreduceRoute's contract): one rank sends nothing;
// float32 on one node takes MPI's allreduce, across nodes kdp's ring unless
// asked for the hierarchical route; bfloat16 messages always take kdp's ring
// (the hierarchical one where nodes hold several ranks, but not all).
TEST(CommHook, RequestNamesTheRouteItTook) {
  Communicator comm = Communicator::world();
  const bool one = comm.size() == 1, one_node = comm.nodes() == 1;
  const bool split = comm.local_size() > 1 && comm.local_size() < comm.size();
  const auto route = [&](AllreduceRoute asked) {
    Tensor t = Tensor::ones({64});
    Request r = comm.iallreduce(t, ReduceOp::Sum, asked);
    r.wait();
    return std::string(r.route());
  };
  EXPECT_EQ(route({false, false}), one ? "local" : one_node ? "mpi" : "ring");
  EXPECT_EQ(route({true, false}), one ? "local" : "ring-bf16");
  EXPECT_EQ(route({false, true}), one        ? "local"
                                  : one_node ? "mpi"
                                  : split    ? "hierarchical"
                                             : "ring");
  EXPECT_EQ(route({true, true}), one ? "local" : split ? "hierarchical-bf16" : "ring-bf16");
  EXPECT_EQ(std::string(Request().route()), "") << "a default request carried nothing";
}

// A gradient that bfloat16 cannot hold, reduced step after step: error
// feedback carries each step's rounding into the next, so the sum of what
// the optimizer received stays within one rounding of the true sum, where
// rounding alone loses the same amount every step.
TEST(CommHook, ErrorFeedbackKeepsTheSumOfGradientsExact) {
  Communicator comm = Communicator::world();
  if (comm.size() == 1) GTEST_SKIP() << "a single rank reduces nothing";
  manual_seed(3);
  auto net = std::make_shared<nn::Linear>(4, 3);
  DistributedDataParallel ddp(net, comm, DDPOptions{}.with_comm_hook(bf16_compress_hook()));
  EXPECT_EQ(ddp.comm_hook().name(), "bf16");
  const float g = 1.0f + std::ldexp(1.0f, -10);  // between two bfloat16 values
  ASSERT_NE(bf16(g), g);
  const int steps = 64;
  double received = 0.0;
  for (int s = 0; s < steps; ++s) {
    // d(sum(w * c))/dw = c: every weight's gradient is g on every rank.
    const Tensor x = Tensor::full({1, 4}, 0.0f);
    ddp.zero_grad(false);
    Tensor out = ddp.forward(x);
    sum(out * Tensor::full({1, 3}, g)).backward();
    received += static_cast<double>(net->bias().grad().to_vector()[0]);
  }
  // The sum telescopes to steps * g minus the last residual, which is at
  // most half a bfloat16 step at 1 (2^-8); rounding alone would lose
  // |bf16(g) - g| = 2^-10 every step, 2^-4 in all.
  const double truth = static_cast<double>(g) * steps;
  const double per_step_rounding = std::abs(static_cast<double>(bf16(g) - g));
  EXPECT_LE(std::abs(received - truth), std::ldexp(1.0, -8))
      << "without error feedback the sum would be off by " << steps * per_step_rounding;
  EXPECT_LT(std::ldexp(1.0, -8), steps * per_step_rounding) << "the test tells the two apart";
}

TEST(CommHook, NamesAndMisuse) {
  EXPECT_EQ(comm_hook_named("hierarchical-bf16")->name(), "hierarchical-bf16");
  try {
    comm_hook_named("fp16");
    FAIL() << "an unknown hook was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'fp16'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
  Communicator comm = Communicator::world();
  DistributedDataParallel ddp(std::make_shared<nn::Linear>(2, 2), comm);
  EXPECT_EQ(ddp.comm_hook().name(), "allreduce");
  EXPECT_THROW(ddp.register_comm_hook(nullptr), ValueError);
  // Bucket size: 25 MB when every rank shares a node, 4 MB across nodes.
  EXPECT_EQ(ddp.bucket_cap_mb(), comm.nodes() > 1 ? 4.0 : 25.0);
  EXPECT_THROW(DistributedDataParallel(std::make_shared<nn::Linear>(2, 2), comm,
                                       DDPOptions{}.with_bucket_cap_mb(-1.0)),
               ValueError);
  ddp.register_comm_hook(hierarchical_hook());
  EXPECT_EQ(ddp.comm_hook().name(), "hierarchical");
}
