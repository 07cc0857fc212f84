#include <gtest/gtest.h>

#include "core/cpu_isa.hpp"
#include "kernels/native/row_gemm.hpp"
#include "test_util.hpp"

using namespace kdp;

namespace {

constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2 and 3 ranks

std::shared_ptr<nn::Module> make_model() {
  manual_seed(11);  // the same weights on every rank and in the reference
  return nn::mlp({6, 16, 3});
}

// A user's model class (its clone runs the original's layers with the copy's
// tensors bound in) with a BatchNorm: fc1, bn, relu, fc2.
struct UserNet : nn::Module {
  UserNet() : Module("UserNet") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override {
    return fc2->forward(relu(bn->forward(fc1->forward(x))));
  }
  using Module::forward;
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::BatchNorm1d> bn;
};

// One epoch in batches of kGlobalBatch samples in order, in one process: the
// mean loss over each batch, plain SGD.
std::vector<std::vector<float>> reference(const data::TensorDataset& set) {
  auto model = make_model();
  optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.5});
  data::DataLoaderOptions o;
  o.batch_size = kGlobalBatch;
  data::DataLoader loader(std::make_shared<data::TensorDataset>(set),
                          std::make_shared<data::SequentialSampler>(set.size()), o);
  for (data::Batch& b : loader) {
    opt.zero_grad();
    cross_entropy(model->forward(b.features), b.labels).backward();
    opt.step();
  }
  std::vector<std::vector<float>> out;
  for (auto& [name, p] : model->named_parameters()) out.push_back(p.to_vector());
  return out;
}

// This rank's loader of `set` in batches of kGlobalBatch over all ranks, in
// DistributedSampler's order (exact: every sample once).
data::DataLoader rank_loader(std::shared_ptr<data::TensorDataset> set, dist::Communicator& comm,
                             data::DistributedSamplerOptions sampling) {
  data::DataLoaderOptions o;
  o.batch_size = kGlobalBatch / comm.size();
  const int64_t n = set->size();
  return data::DataLoader(
      std::move(set),
      std::make_shared<data::DistributedSampler>(n, comm.size(), comm.rank(), sampling), o);
}

}  // namespace

// DistributedSampler's exact mode gives every sample once, so the epoch's last
// batch may be shared unevenly (29 samples: 5 in the last batch, 3 + 2 at 2
// ranks, 2 + 2 + 1 at 3) or leave a rank none (26: 2 in the last batch, none
// for the third rank). The Trainer weights each rank's mean by its share:
// every step is the mean over its samples, as in one process.
TEST(TrainerLayouts, AnUnevenLastBatchIsTheMeanOverItsSamples) {
  dist::Communicator comm = dist::Communicator::world();
  for (int64_t n : {int64_t{29}, int64_t{26}}) {
    auto set = data::synthetic_classification(n, 6, 3, 5);
    auto model = make_model();
    dist::DistributedDataParallel ddp(model, comm);
    optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.5});
    data::DataLoader loader = rank_loader(
        set, comm, data::DistributedSamplerOptions{}.with_shuffle(false).with_exact(true));
    train::TrainerOptions t;
    t.progress = -1;
    t.epochs = 1;
    train::Trainer trainer(t, comm);
    nn::CrossEntropyLoss ce;
    const train::FitResult r = trainer.fit(ddp, std::ref(ce), opt, loader);
    EXPECT_EQ(r.global_step, (n + kGlobalBatch - 1) / kGlobalBatch) << n << " samples";
    const auto want = reference(*set);
    const auto params = model->named_parameters();
    ASSERT_EQ(params.size(), want.size());
    for (size_t i = 0; i < params.size(); ++i) {
      // A mean of weighted means rounds differently from one mean: float
      // rounding only (an unweighted average is off by tens of percent).
      test::expect_close(params[i].second.to_vector(), want[i], 1e-5, 1e-4,
                         std::to_string(n) + " samples, " + std::to_string(comm.size()) +
                             " ranks: " + params[i].first);
    }
  }
}

// What reproducible mode cannot keep bit for bit is refused before training,
// with the reason.
TEST(TrainerLayouts, ReproducibleModeRefusesWhatItCannotKeep) {
  dist::Communicator comm = dist::Communicator::world();
  auto set = data::synthetic_classification(24, 6, 3, 5);
  const auto refusal = [&](std::shared_ptr<nn::Module> model, nn::Module& fitted, bool exact) {
    optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.5});
    data::DataLoader loader =
        rank_loader(set, comm, data::DistributedSamplerOptions{}.with_exact(exact));
    train::TrainerOptions t;
    t.progress = -1;
    t.reproducible = true;
    train::Trainer trainer(t, comm);
    nn::CrossEntropyLoss ce;
    try {
      trainer.fit(fitted, std::ref(ce), opt, loader);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("trained");
  };
  auto bare = make_model();
  EXPECT_EQ(refusal(bare, *bare, true), "trained");
  auto wrapped = make_model();
  dist::DistributedDataParallel ddp(wrapped, comm);
  EXPECT_NE(refusal(wrapped, ddp, true).find("pass the bare model"), std::string::npos);
  manual_seed(11);
  auto batch_norm =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::BatchNorm1d>(16),
          std::make_shared<nn::Linear>(16, 3)});
  // (Shards of one sample, which BatchNorm cannot normalise.)
  EXPECT_NE(refusal(batch_norm, *batch_norm, true).find("two samples or more"), std::string::npos);
  // Synchronised, it needs one sample per shard (and trains); synchronised
  // and plain layers in one model are refused.
  nn::convert_sync_batchnorm(batch_norm);
  EXPECT_EQ(refusal(batch_norm, *batch_norm, true), "trained");
  auto mixed = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::BatchNorm1d>(16),
      std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::BatchNorm1d>(16),
      std::make_shared<nn::Linear>(16, 3)});
  nn::convert_sync_batchnorm(mixed);
  dynamic_cast<nn::BatchNorm&>(*(*mixed)[3]).synchronize(nullptr);
  EXPECT_NE(refusal(mixed, *mixed, true).find("'1' is synchronised (SyncBatchNorm) and '3' is not"),
            std::string::npos);
  auto twice = std::make_shared<nn::Linear>(6, 6);
  auto tied = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      twice, std::make_shared<nn::BatchNorm1d>(6), twice, std::make_shared<nn::Linear>(6, 3)});
  nn::convert_sync_batchnorm(tied);
  EXPECT_NE(refusal(tied, *tied, true).find("'0.weight' and '2.weight' are one tensor"),
            std::string::npos);
  auto cumulative =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(6, 16),
          std::make_shared<nn::BatchNorm1d>(16, nn::BatchNormOptions{}.with_momentum(std::nullopt)),
          std::make_shared<nn::Linear>(16, 3)});
  EXPECT_NE(refusal(cumulative, *cumulative, true).find("cumulative average"), std::string::npos);
  if (comm.size() > 1) {
    // Fewer samples than ranks: some rank has none in the whole epoch.
    auto few = data::synthetic_classification(comm.size() - 1, 6, 3, 5);
    auto model = make_model();
    optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.5});
    data::DataLoader loader =
        rank_loader(few, comm, data::DistributedSamplerOptions{}.with_exact(true));
    train::TrainerOptions t;
    t.progress = -1;
    train::Trainer trainer(t, comm);
    nn::CrossEntropyLoss ce;
    try {
      trainer.fit(*model, std::ref(ce), opt, loader);
      ADD_FAILURE() << "a rank without samples trained";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("no training sample"), std::string::npos) << e.what();
    }
    auto padded = make_model();
    EXPECT_NE(refusal(padded, *padded, false).find("exact mode"), std::string::npos);
  }
}

// Reproducible mode with SyncBatchNorm in a user's model class: the shards'
// copies meet in the synchronised layer as a Sequential's do, so both train
// to the same bits from the same weights (a user model whose shards each
// normalised alone would not).
TEST(TrainerLayouts, ReproducibleSyncBatchNormInAUserModelMeetsAcrossShards) {
  dist::Communicator comm = dist::Communicator::world();
  auto set = data::synthetic_classification(48, 6, 3, 5);
  const auto train = [&](const std::shared_ptr<nn::Module>& model) {
    nn::convert_sync_batchnorm(model, comm);
    optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.5});
    data::DataLoader loader =
        rank_loader(set, comm, data::DistributedSamplerOptions{}.with_exact(true));
    train::TrainerOptions t;
    t.progress = -1;
    t.epochs = 2;
    t.reproducible = true;
    train::Trainer trainer(t, comm);
    nn::CrossEntropyLoss ce;
    trainer.fit(*model, std::ref(ce), opt, loader);
    std::vector<std::vector<float>> state;
    for (const auto& [name, v] : model->state_dict()) state.push_back(v.to_vector());
    return state;
  };
  manual_seed(5);
  auto user = std::make_shared<UserNet>();
  auto sequential =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::BatchNorm1d>(16),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3)});
  const nn::StateDict from = user->state_dict(), to = sequential->state_dict();
  ASSERT_EQ(from.size(), to.size());
  for (size_t i = 0; i < to.size(); ++i) {
    Tensor t = to[i].second;
    t.copy_(from[i].second);
  }
  const auto want = train(sequential), got = train(user);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "state entry " << i << " (" << from[i].first << ")";
  }
}

// The step strategy is chosen once for the model and the options: a model
// that keeps a batch's rows apart goes in one pass (in bf16 where the CPU
// has AVX2), with SyncBatchNorm the shards go
// together, any other model one by one.
TEST(TrainerLayouts, TheStepStrategyFitsTheModel) {
  dist::Communicator comm = dist::Communicator::world();
  auto set = data::synthetic_classification(48, 6, 3, 5);
  const auto fit = [&](std::shared_ptr<nn::Module> model, bool reproducible, Precision precision) {
    optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.5});
    data::DataLoader loader =
        rank_loader(set, comm, data::DistributedSamplerOptions{}.with_exact(true));
    train::TrainerOptions t;
    t.progress = -1;
    t.reproducible = reproducible;
    t.shards = 6;  // BatchNorm's two samples per shard in batches of 12
    t.precision = precision;
    train::Trainer trainer(t, comm);
    nn::CrossEntropyLoss ce;
    return trainer.fit(*model, std::ref(ce), opt, loader).step_strategy;
  };
  const auto with_batch_norm = [] {
    manual_seed(11);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::BatchNorm1d>(16),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3)});
  };
  EXPECT_EQ(fit(make_model(), false, Precision::fp32), "default");
  EXPECT_EQ(fit(make_model(), true, Precision::fp32), "one pass");
  EXPECT_EQ(fit(make_model(), true, Precision::bf16),
            kdp::detail::row_gemm_bf16_fast() ? "one pass" : "one by one");
  {
    const auto before = kdp::detail::set_cpu_isa_limit(kdp::detail::CpuIsa::Baseline);
    EXPECT_EQ(fit(make_model(), true, Precision::bf16), "one by one");
    kdp::detail::set_cpu_isa_limit(before);
  }
  EXPECT_EQ(fit(with_batch_norm(), true, Precision::fp32), "one by one");
  auto synchronised = with_batch_norm();
  nn::convert_sync_batchnorm(synchronised, comm);
  EXPECT_EQ(fit(synchronised, true, Precision::fp32), "together");
}
