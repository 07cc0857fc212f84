#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "dist/algorithms/exact_sum.hpp"
#include "dist_test_util.hpp"
#include "test_util.hpp"

using namespace kdp;
using namespace kdp::dist;

namespace {

// conv -> BN -> ReLU -> global average pool -> linear, the same on every rank.
std::shared_ptr<nn::Sequential> cnn() {
  manual_seed(17);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(3),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(1),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(3, 4)});
}

nn::BatchNorm& bn_of(const std::shared_ptr<nn::Sequential>& net) {
  return dynamic_cast<nn::BatchNorm&>(*(*net)[1]);
}

// Rank r's rows of a batch of `total`: the first total % size ranks get one more.
std::pair<int64_t, int64_t> my_rows(int64_t total, const Communicator& comm) {
  const int64_t base = total / comm.size(), extra = total % comm.size();
  const int64_t start = comm.rank() * base + std::min<int64_t>(comm.rank(), extra);
  return {start, start + base + (comm.rank() < extra ? 1 : 0)};
}

}  // namespace

TEST(SyncBatchNorm, RanksAndDevicesEqualOneDeviceOnTheWholeBatch) {
  Communicator comm = Communicator::world();
  for (int devs : {1, 2}) {
    for (int64_t batch : {int64_t{12}, int64_t{11}}) {  // 11: an uneven last batch
      const std::string what =
          fmt::format("{} rank(s) x {} device(s), batch {}", comm.size(), devs, batch);
      const Tensor x = test::random_tensor({batch, 2, 4, 4}, 7, -1.0f, 2.0f);
      std::vector<float> labels;
      for (int64_t i = 0; i < batch; ++i) labels.push_back(static_cast<float>(i % 4));
      const Tensor t = Tensor::from_host(labels, {batch});

      // The reference: one device, the whole batch, a plain BatchNorm.
      auto reference = cnn();
      const Tensor ref_loss = cross_entropy(reference->forward(x), t);
      ref_loss.backward();

      // The same model synchronised, over the ranks and `devs` devices each.
      auto net = cnn();
      nn::convert_sync_batchnorm(net);
      std::shared_ptr<nn::Module> inner = net;
      if (devs > 1) inner = std::make_shared<DataParallel>(net, devices(devs));
      DistributedDataParallel ddp(inner, comm);
      const auto [start, end] = my_rows(batch, comm);
      // Σ of this rank's losses scaled so that DDP's average of the ranks'
      // gradients is the gradient of the whole batch's mean loss.
      const Tensor out = ddp.forward(x.slice(0, start, end));
      // The output is on DataParallel's output device, devices[0] (another
      // instance than the default one where the backend has several).
      const Tensor local =
          cross_entropy(out, t.slice(0, start, end).to(out.device()), Reduction::Sum);
      (local * (static_cast<float>(comm.size()) / static_cast<float>(batch))).backward();
      ddp.finish();

      double sums[1] = {local.item()};
      comm.allreduce(sums, 1, ReduceOp::Sum);
      EXPECT_NEAR(sums[0] / static_cast<double>(batch), ref_loss.item(), 1e-5) << what;
      const auto a = net->named_parameters();
      const auto b = reference->named_parameters();
      for (size_t i = 0; i < a.size(); ++i) {
        test::expect_close(a[i].second.grad().to_vector(), b[i].second.grad().to_vector(), 1e-6,
                           2e-4, what + " gradient of " + a[i].first);
      }
      const auto wanted = bn_of(reference).state_dict();
      for (const auto& [name, buf] : bn_of(net).state_dict()) {
        const Tensor* want = nn::find(wanted, name);
        ASSERT_NE(want, nullptr);
        test::expect_close(buf.to_vector(), want->to_vector(), 1e-6, 1e-5, what + " " + name);
        test::expect_same_on_every_rank(comm, buf.to_vector(), what + " " + name);
      }
    }
  }
}

TEST(SyncBatchNorm, EvaluationUsesTheRunningStatisticsAlikeOnEveryRank) {
  Communicator comm = Communicator::world();
  auto net = cnn();
  nn::convert_sync_batchnorm(net);
  DistributedDataParallel ddp(net, comm);
  ddp.forward(test::random_tensor({6, 2, 4, 4}, 100 + static_cast<uint64_t>(comm.rank())));
  // Different data on every rank, yet one set of statistics.
  test::expect_same_on_every_rank(comm, bn_of(net).running_mean().to_vector(), "running_mean");
  net->eval();
  const Tensor x = test::random_tensor({5, 2, 4, 4}, 3);
  const std::vector<float> y = net->forward(x).to_vector();
  test::expect_same_on_every_rank(comm, y, "evaluation output");
  // The eval forward is a plain BatchNorm's on the running statistics.
  auto plain = cnn();
  plain->load_state_dict(net->state_dict());
  plain->eval();
  test::expect_close(y, plain->forward(x).to_vector(), 1e-6, 1e-6, "eval");
}

TEST(SyncBatchNorm, AFailingReplicaReleasesTheOthers) {
  // Replica 1 fails before its BatchNorm: replica 0, waiting there for it,
  // is released and the error names replica 1.
  class FailsOnDevice1 : public nn::Module {
   public:
    FailsOnDevice1() : Module("FailsOnDevice1") {
      bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(3));
    }
    Tensor forward(const Tensor& x) override {
      if (x.device().index() == 1) throw ValueError("boom before the BatchNorm");
      return bn->forward(x);
    }
    using Module::forward;
    std::shared_ptr<nn::BatchNorm1d> bn;
  };
  auto m = std::make_shared<FailsOnDevice1>();
  nn::convert_sync_batchnorm(m, Communicator::world());
  DataParallel dp(m, devices(2));
  try {
    dp.forward(test::random_tensor({8, 3}, 1));
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("in replica 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
  }
  // The next call (no failure on any device) works.
  auto ok = cnn();
  nn::convert_sync_batchnorm(ok, Communicator::world());
  DataParallel dp2(ok, devices(2));
  EXPECT_EQ(dp2.forward(test::random_tensor({4, 2, 4, 4}, 2)).shape(), Shape({4, 4}));
}

// A copy of a converted model (what reproducible mode runs each shard
// through) meets the original's replicas: the same synchronizer.
TEST(SyncBatchNorm, ACopyOfAConvertedLayerStaysSynchronised) {
  auto net = cnn();
  nn::convert_sync_batchnorm(net, Communicator::world());
  auto copy = std::dynamic_pointer_cast<nn::Sequential>(net->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(bn_of(copy).synchronizes_replicas());
  EXPECT_EQ(bn_of(copy).synchronizer(), bn_of(net).synchronizer());
  EXPECT_FALSE(
      bn_of(std::dynamic_pointer_cast<nn::Sequential>(cnn()->clone())).synchronizes_replicas());
}

// Exact sums: the same bits however the parts are shared between the ranks
// (all on one, round robin, in reverse), where a plain sum of the same parts
// depends on their order; and within the grid's spacing of the true sum.
TEST(SyncBatchNorm, ExactSumsAreTheSameBitsInAnyGrouping) {
  Communicator comm = Communicator::world();
  const int parts = 12;
  const size_t length = 5;
  std::vector<std::vector<double>> all;
  for (int p = 0; p < parts; ++p) {
    // Entry 0: large values that cancel and small ones that a plain sum
    // loses in some orders; 1: numbers of one sign; 2: zeros; 3 and 4: near
    // the largest double, cancelling and not.
    const double sign = p % 2 == 0 ? 1.0 : -1.0;
    const double big = sign * std::ldexp(1.0, 40 + p % 3);
    const double huge = std::ldexp(1.5, 1020);
    all.push_back({big + 0.3 * p, 0.1 * (p + 1), 0.0, sign * huge, p < 2 ? huge : 0.0});
  }
  auto plain = [&](const std::vector<int>& order) {
    double s = 0.0;
    for (int p : order) s += all[static_cast<size_t>(p)][0];
    return s;
  };
  std::vector<int> forward(parts), reverse(parts);
  for (int p = 0; p < parts; ++p) forward[static_cast<size_t>(p)] = p;
  for (int p = 0; p < parts; ++p) reverse[static_cast<size_t>(p)] = parts - 1 - p;
  ASSERT_NE(plain(forward), plain(reverse)) << "the parts do not show a plain sum's order";

  auto share = [&](const std::function<bool(int)>& mine, bool reversed) {
    std::vector<std::vector<double>> held;
    for (int p : reversed ? reverse : forward) {
      if (mine(p)) held.push_back(all[static_cast<size_t>(p)]);
    }
    return dist::detail::exact_sum(comm, held, length, parts);
  };
  const int r = comm.rank(), n = comm.size();
  const std::vector<double> on_first = share([&](int) { return r == 0; }, false);
  const std::vector<double> round_robin = share([&](int p) { return p % n == r; }, false);
  const std::vector<double> on_last = share([&](int) { return r == n - 1; }, true);
  for (size_t k = 0; k < length; ++k) {
    EXPECT_EQ(std::memcmp(&on_first[k], &round_robin[k], sizeof(double)), 0) << k;
    EXPECT_EQ(std::memcmp(&on_first[k], &on_last[k], sizeof(double)), 0) << k;
  }
  // The true sums: entry 0 is 0.3 (0 + 1 + ... + 11) = 19.8 on a grid of
  // 2^(43 + 5 - 51) = 1/8, each term off by at most half of it.
  EXPECT_NEAR(on_first[0], 19.8, parts * 0.0625);
  EXPECT_NEAR(on_first[1], 7.8, 1e-12);
  EXPECT_EQ(on_first[2], 0.0);
  EXPECT_EQ(on_first[3], 0.0);
  EXPECT_EQ(on_first[4], std::ldexp(3.0, 1020));
}
