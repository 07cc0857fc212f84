#include <gtest/gtest.h>

#include <cstring>

#include "test_util.hpp"

using namespace kdp;
using namespace kdp::dist;

namespace {

constexpr int64_t kBatch = 12;  // divisible by 1, 2 and 3 ranks

Tensor global_inputs(uint64_t seed) {
  return test::random_tensor({kBatch, 6}, seed);
}

Tensor global_labels(uint64_t seed) {
  std::vector<float> v(kBatch);
  for (int64_t i = 0; i < kBatch; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>((i * 7 + seed) % 3);
  return Tensor::from_host(v, {kBatch});
}

Tensor shard(const Tensor& t, const Communicator& comm) {
  const int64_t per = t.size(0) / comm.size();
  return t.slice(0, per * comm.rank(), per * (comm.rank() + 1));
}

std::shared_ptr<nn::Module> make_model() {
  manual_seed(42);  // every rank builds the same weights
  return nn::mlp({6, 16, 16, 3});
}

// Relative error against the reference, with an absolute floor for entries near
// zero. Ranks see different partial sums than one process does (a mean of
// per-rank means instead of one mean), which changes only float rounding.
void expect_grads_match(const nn::Module& ddp_model, const nn::Module& reference,
                        const std::string& what) {
  const auto a = ddp_model.named_parameters();
  const auto b = reference.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].second.grad().defined()) << what << " " << a[i].first;
    test::expect_close(a[i].second.grad().to_vector(), b[i].second.grad().to_vector(), 1e-6, 1e-5,
                       what + " " + a[i].first);
  }
}

// Parameters must be bit-identical on every rank.
void expect_identical_across_ranks(Communicator& comm, const nn::Module& m) {
  for (const auto& [name, p] : m.named_parameters()) {
    const auto mine = p.to_vector();
    const auto all = comm.allgather_bytes(mine.data(), mine.size() * sizeof(float));
    for (size_t r = 0; r < all.size(); ++r) {
      ASSERT_EQ(all[r].size(), mine.size() * sizeof(float));
      EXPECT_EQ(std::memcmp(all[r].data(), all[0].data(), all[r].size()), 0)
          << name << " differs between rank 0 and rank " << r;
    }
  }
}

}  // namespace

TEST(DistributedDataParallel, GradientsEqualOneProcessOnTheWholeBatch) {
  Communicator comm = Communicator::world();
  for (auto overlap : {DDPOptions::Overlap::Always, DDPOptions::Overlap::Never}) {
    for (bool tiny_buckets : {false, true}) {
      auto model = make_model();
      auto reference = model->clone();
      DDPOptions o;
      o.overlap = overlap;
      if (tiny_buckets) {
        o.bucket_cap_mb = 1e-9;
        o.first_bucket_mb = 1e-9;
      }
      DistributedDataParallel ddp(model, comm, o);
      if (tiny_buckets) {
        EXPECT_EQ(ddp.bucket_layout().size(), model->named_parameters().size());
      } else {
        EXPECT_EQ(ddp.bucket_layout().size(), 1u);  // 700 floats fit the first bucket
      }
      EXPECT_EQ(ddp.bucket_layout().front().front(), "4.bias");  // reverse parameter order

      Tensor x = global_inputs(1), y = global_labels(1);
      cross_entropy(reference->forward(x), y).backward();
      cross_entropy(ddp.forward(shard(x, comm)), shard(y, comm)).backward();
      const std::string what =
          std::string(tiny_buckets ? "tiny buckets" : "default buckets") +
          (overlap == DDPOptions::Overlap::Never ? ", reduced after backward" : ", overlapped");
      expect_grads_match(*model, *reference, what);
      EXPECT_EQ(ddp.reductions(), 1) << what;
    }
  }
}

TEST(DistributedDataParallel, TenStepsEqualOneProcessAndRanksStayIdentical) {
  Communicator comm = Communicator::world();
  auto model = make_model();
  auto reference = model->clone();
  DistributedDataParallel ddp(model, comm);
  optim::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  optim::SGD opt(ddp.named_parameters(), o);
  optim::SGD ref_opt(reference->named_parameters(), o);
  for (int step = 0; step < 10; ++step) {
    Tensor x = global_inputs(100 + static_cast<uint64_t>(step));
    Tensor y = global_labels(static_cast<uint64_t>(step));
    ref_opt.zero_grad();
    cross_entropy(reference->forward(x), y).backward();
    ref_opt.step();
    opt.zero_grad();
    cross_entropy(ddp.forward(shard(x, comm)), shard(y, comm)).backward();
    opt.step();
    expect_identical_across_ranks(comm, *model);
  }
  const auto a = model->named_parameters();
  const auto b = reference->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    test::expect_close(a[i].second.to_vector(), b[i].second.to_vector(), 1e-6, 1e-5, a[i].first);
  }
}

TEST(DistributedDataParallel, NoSyncAccumulatesThenOneSyncedStepEqualsTheWholeBatch) {
  Communicator comm = Communicator::world();
  auto model = make_model();
  auto reference = model->clone();
  DistributedDataParallel ddp(model, comm);
  const int k = 3;
  std::vector<Tensor> xs, ys;
  for (int j = 0; j < k; ++j) {
    xs.push_back(global_inputs(200 + static_cast<uint64_t>(j)));
    ys.push_back(global_labels(static_cast<uint64_t>(j)));
  }
  // The reference: one mean loss over all k * kBatch samples.
  cross_entropy(reference->forward(cat(xs, 0)), cat(ys, 0)).backward();
  // DDP: k micro-batches, each loss scaled by 1/k, the first k-1 without sync.
  ddp.zero_grad(false);
  {
    auto guard = ddp.no_sync();
    for (int j = 0; j < k - 1; ++j) {
      (cross_entropy(ddp.forward(shard(xs[static_cast<size_t>(j)], comm)),
                     shard(ys[static_cast<size_t>(j)], comm)) /
       static_cast<float>(k))
          .backward();
    }
    EXPECT_EQ(ddp.reductions(), 0);
  }
  (cross_entropy(ddp.forward(shard(xs.back(), comm)), shard(ys.back(), comm)) /
   static_cast<float>(k))
      .backward();
  EXPECT_EQ(ddp.reductions(), 1);
  expect_grads_match(*model, *reference, "no_sync");
}

TEST(DistributedDataParallel, DifferentModelsFailOnEveryRankNamingTheParameter) {
  Communicator comm = Communicator::world();
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  manual_seed(1);
  auto model = nn::mlp({6, comm.rank() == 1 ? 20 : 16, 3});
  try {
    DistributedDataParallel ddp(model, comm);
    FAIL() << "expected CommError on rank " << comm.rank();
  } catch (const CommError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("parameter 0.weight [16, 6] on rank"), std::string::npos) << msg;
    EXPECT_NE(msg.find("parameter 0.weight [20, 6] on rank 1"), std::string::npos) << msg;
  }
  // Nothing is left half-way: the next collective on the communicator works.
  comm.barrier();
}

namespace {
class WithUnusedBranch : public nn::Module {
 public:
  WithUnusedBranch() : Module("WithUnusedBranch") {
    used = register_module("used", std::make_shared<nn::Linear>(6, 3));
    unused = register_module("unused", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override { return used->forward(x); }
  using Module::forward;
  std::shared_ptr<nn::Linear> used, unused;
};
}  // namespace

TEST(DistributedDataParallel, UnusedParametersAreNamedOrHandled) {
  Communicator comm = Communicator::world();
  manual_seed(5);
  {
    DistributedDataParallel ddp(std::make_shared<WithUnusedBranch>(), comm);
    try {
      ddp.forward(global_inputs(1));
      FAIL() << "expected StateError";
    } catch (const StateError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("unused.weight, unused.bias"), std::string::npos) << msg;
      EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
    }
  }
  DDPOptions o;
  o.find_unused_parameters = true;
  auto model = std::make_shared<WithUnusedBranch>();
  DistributedDataParallel ddp(model, comm, o);
  for (int step = 0; step < 2; ++step) {
    ddp.zero_grad(false);
    cross_entropy(ddp.forward(shard(global_inputs(3), comm)), shard(global_labels(3), comm))
        .backward();
    EXPECT_EQ(ddp.reductions(), step + 1);
    for (float v : model->unused->weight().grad().to_vector()) ASSERT_EQ(v, 0.0f);
  }
}

TEST(DistributedDataParallel, AroundDataParallelEqualsOneProcess) {
  Communicator comm = Communicator::world();
  const auto devs = devices(2);
  auto model = make_model();
  auto reference = model->clone();
  auto dp = std::make_shared<DataParallel>(model, devs);
  DistributedDataParallel ddp(dp, comm);
  Tensor x = global_inputs(7), y = global_labels(7);
  cross_entropy(reference->forward(x), y).backward();
  Tensor xs = shard(x, comm).to(devs[0]);
  Tensor ys = shard(y, comm).to(devs[0]);
  cross_entropy(ddp.forward(xs), ys).backward();
  expect_grads_match(*model, *reference, "DDP(DataParallel)");
  EXPECT_EQ(ddp.named_parameters()[0].first, "module.module.0.weight");
}

// A GPT's head is tied to its token embedding: one parameter in the buckets
// (reduced once, under its first name), and the gradients of one process on
// the whole batch, with a bucket per parameter and with the default buckets.
TEST(DistributedDataParallel, ATiedWeightIsReducedOnce) {
  Communicator comm = Communicator::world();
  nn::GPTOptions g;
  g.depth = 1;
  g.heads = 2;
  g.dim = 8;
  g.dropout = 0.0f;
  std::vector<float> ids(kBatch * 4), next(kBatch * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<float>((i * 5 + 1) % 9);
    next[i] = static_cast<float>((i * 5 + 6) % 9);
  }
  const Tensor x = Tensor::from_host(ids, {kBatch, 4}), y = Tensor::from_host(next, {kBatch, 4});
  for (bool tiny_buckets : {false, true}) {
    manual_seed(42);
    auto model = std::make_shared<nn::GPT>(9, 4, g);
    auto reference = model->clone();
    DDPOptions o;
    if (tiny_buckets) {
      o.bucket_cap_mb = 1e-9;
      o.first_bucket_mb = 1e-9;
    }
    DistributedDataParallel ddp(model, comm, o);
    size_t listed = 0;
    for (const auto& bucket : ddp.bucket_layout()) {
      for (const std::string& name : bucket) {
        ++listed;
        EXPECT_NE(name, "head.weight");
      }
    }
    EXPECT_EQ(listed, model->named_parameters().size());
    auto loss = [](const Tensor& logits, const Tensor& target) {
      return cross_entropy(logits.reshape({target.numel(), 9}), target.reshape({target.numel()}));
    };
    loss(reference->forward(x), y).backward();
    loss(ddp.forward(shard(x, comm)), shard(y, comm)).backward();
    expect_grads_match(*model, *reference, tiny_buckets ? "gpt, tiny buckets" : "gpt");
  }
}
