#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "temp_dir.hpp"
#include "test_util.hpp"

using namespace kdp;
using namespace kdp::dist;

namespace {

constexpr int64_t kBatch = 12;  // divisible by 1, 2 and 3 ranks

std::shared_ptr<nn::Module> make_model() {
  manual_seed(21);  // the same weights on every rank
  return nn::mlp({6, 32, 16, 3});
}

// This rank's share of step `step`'s batch (the same global batch at any rank count).
std::pair<Tensor, Tensor> batch(int step, const Communicator& comm) {
  const Tensor x = test::random_tensor({kBatch, 6}, 100 + static_cast<uint64_t>(step));
  std::vector<float> y(kBatch);
  for (int64_t i = 0; i < kBatch; ++i)
    y[static_cast<size_t>(i)] = static_cast<float>((i + step) % 3);
  const int64_t per = kBatch / comm.size();
  return {x.slice(0, per * comm.rank(), per * (comm.rank() + 1)),
          Tensor::from_host(y, {kBatch}).slice(0, per * comm.rank(), per * (comm.rank() + 1))};
}

std::vector<std::vector<float>> values(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.to_vector());
  return out;
}

optim::AdamOptions adam() {
  return optim::AdamOptions{}.with_lr(0.01).with_weight_decay(0.01);
}

// A model under DDP with Adam, sharded when `sharded`: the same start on
// every rank and in every Trainee.
struct Trainee {
  std::shared_ptr<nn::Module> model = make_model();
  DistributedDataParallel ddp;
  optim::Adam opt;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;

  Trainee(Communicator& comm, bool sharded)
      : ddp(model, comm), opt(model->named_parameters(), adam()) {
    if (sharded) zero = std::make_unique<ZeroRedundancyOptimizer>(opt, comm);
  }
  // Steps from, from + 1, ... (each its global batch).
  void steps(int from, int count, const Communicator& comm) {
    for (int s = from; s < from + count; ++s) {
      const auto [x, y] = batch(s, comm);
      opt.zero_grad();
      cross_entropy(ddp.forward(x), y).backward();
      opt.step();
    }
  }
};

}  // namespace

// The same averaged gradients and the same element-wise update: sharded Adam
// ends with the replicated optimizer's weights bit for bit, every rank holding
// only its share of the state.
TEST(ZeroRedundancyOptimizer, EqualsTheReplicatedOptimizerBitForBit) {
  Communicator comm = Communicator::world();
  Trainee plain(comm, false), sharded(comm, true);
  plain.steps(0, 5, comm);
  sharded.steps(0, 5, comm);
  EXPECT_EQ(values(*sharded.model), values(*plain.model));
  // Each rank holds the state of its slice alone, and the slices cover the model.
  const ZeroRedundancyOptimizer& zero = *sharded.zero;
  const optim::OptimizerState mine = sharded.opt.state_dict();
  for (const auto& [name, p] : sharded.model->named_parameters()) {
    const auto [begin, end] = zero.range(name);
    ASSERT_EQ(mine.tensors.count(name) == 1, begin < end) << name;
    if (begin < end) {
      EXPECT_EQ(mine.tensors.at(name).at("exp_avg").numel(), end - begin) << name;
    }
  }
  int64_t owned = zero.owned_elements();
  comm.allreduce(&owned, 1, ReduceOp::Sum);
  EXPECT_EQ(owned, zero.total_elements());
  EXPECT_EQ(zero.state_bytes(), static_cast<size_t>(zero.owned_elements()) * 2 * sizeof(float))
      << "Adam keeps two moments per element it updates";
}

// A checkpoint holds the whole state, as the replicated optimizer's, gathered
// onto rank 0 alone (the others keep no more than their share); loading it
// keeps each rank's share, and training goes on as without sharding.
TEST(ZeroRedundancyOptimizer, GathersTheWholeStateAndResplitsItOnLoad) {
  Communicator comm = Communicator::world();
  Trainee plain(comm, false), sharded(comm, true);
  plain.steps(0, 3, comm);
  sharded.steps(0, 3, comm);
  sharded.opt.gather_state();
  const optim::OptimizerState whole = sharded.opt.state_dict();
  const optim::OptimizerState want = plain.opt.state_dict();
  if (comm.rank() == 0) {
    ASSERT_EQ(whole.tensors.size(), want.tensors.size());
    for (const auto& [name, entries] : want.tensors) {
      for (const auto& [key, t] : entries) {
        EXPECT_EQ(whole.tensors.at(name).at(key).to_vector(), t.to_vector()) << name << "/" << key;
      }
    }
    EXPECT_EQ(whole.scalars, want.scalars);
  } else {
    for (const auto& [name, entries] : whole.tensors) {
      const auto [begin, end] = sharded.zero->range(name);
      for (const auto& [key, t] : entries) EXPECT_EQ(t.numel(), end - begin) << name << "/" << key;
    }
  }

  // The replicated optimizer's state loaded into a fresh sharded one (another
  // run, possibly at another rank count): three more steps agree bit for bit.
  Trainee resumed(comm, true);
  resumed.model->load_state_dict(plain.model->state_dict());
  resumed.opt.load_state_dict(want);
  const optim::OptimizerState kept = resumed.opt.state_dict();
  for (const auto& [name, p] : resumed.model->named_parameters()) {
    const auto [begin, end] = resumed.zero->range(name);
    EXPECT_EQ(kept.tensors.count(name) == 1, begin < end)
        << name << ": loading keeps this rank's share only";
  }
  plain.steps(3, 3, comm);
  resumed.steps(3, 3, comm);
  EXPECT_EQ(values(*resumed.model), values(*plain.model));
}

#if KDP_ENABLE_HDF5  // checkpoints are HDF5 files
namespace {

// Rank 0's text on every rank.
std::string from_rank0(Communicator& comm, const std::string& text) {
  const auto all = comm.allgather_bytes(text.data(), text.size());
  return std::string(all.front().begin(), all.front().end());
}

}  // namespace

// Every rank writes its own slice of the state into the checkpoint (nothing
// is gathered): the file holds what the replicated optimizer's holds, and a
// sharded run resumed from it goes on as the replicated one.
TEST(ZeroRedundancyOptimizer, EachRankWritesItsSliceOfTheCheckpoint) {
  Communicator comm = Communicator::world();
  Trainee plain(comm, false), sharded(comm, true);
  plain.steps(0, 3, comm);
  sharded.steps(0, 3, comm);
  std::unique_ptr<test::TempDir> dir;  // rank 0's, seen by every rank
  if (comm.rank() == 0) dir = std::make_unique<test::TempDir>();
  const std::string where = from_rank0(comm, dir ? dir->path().string() : "");
  const std::string whole = where + "/whole.h5", sliced = where + "/sliced.h5";
  io::TrainingState st;
  st.world_size = comm.size();
  if (comm.rank() == 0) io::save_checkpoint(whole, *plain.model, plain.opt, st);

  const std::optional<optim::OptimizerState> layout = sharded.opt.state_layout();
  ASSERT_EQ(layout.has_value(), comm.rank() == 0) << "the layout is gathered onto rank 0";
  std::optional<io::SlicedCheckpoint> file;
  if (comm.rank() == 0) file.emplace(sliced, *sharded.model, sharded.opt, *layout, st);
  ASSERT_TRUE(
      io::write_state_slices(from_rank0(comm, file ? file->plan() : ""), sharded.opt, comm.rank()));
  comm.barrier();
  if (comm.rank() == 0) {
    EXPECT_FALSE(std::filesystem::exists(sliced)) << "in place before every rank wrote";
    file->commit();
  }
  comm.barrier();

  const io::Checkpoint want = io::read_checkpoint(whole), got = io::read_checkpoint(sliced);
  ASSERT_EQ(got.optimizer.tensors.size(), want.optimizer.tensors.size());
  for (const auto& [name, entries] : want.optimizer.tensors) {
    for (const auto& [key, t] : entries) {
      EXPECT_EQ(got.optimizer.tensors.at(name).at(key).to_vector(), t.to_vector())
          << name << "/" << key;
    }
  }
  EXPECT_EQ(got.optimizer.scalars, want.optimizer.scalars);
  EXPECT_EQ(got.optimizer.hyperparameters, want.optimizer.hyperparameters);

  Trainee resumed(comm, true);
  io::load_checkpoint(sliced, *resumed.model, resumed.opt);
  plain.steps(3, 3, comm);
  resumed.steps(3, 3, comm);
  EXPECT_EQ(values(*resumed.model), values(*plain.model));
  comm.barrier();  // before rank 0 removes the directory
}
#endif  // KDP_ENABLE_HDF5

TEST(ZeroRedundancyOptimizer, RefusesAnOptimizerThatHasStepped) {
  Communicator comm = Communicator::world();
  auto model = make_model();
  optim::Adam opt(model->named_parameters(), adam());
  const auto [x, y] = batch(0, comm);
  cross_entropy(model->forward(x), y).backward();
  opt.step();
  try {
    ZeroRedundancyOptimizer zero(opt, comm);
    FAIL() << "sharded an optimizer with state";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("before its first step"), std::string::npos) << e.what();
  }
}

// A tied weight (a GPT's head and token embedding) is one parameter: ZeRO
// shards and steps it once, and ends with the replicated optimizer's weights
// bit for bit.
TEST(ZeroRedundancyOptimizer, StepsATiedWeightOnce) {
  Communicator comm = Communicator::world();
  nn::GPTOptions g;
  g.depth = 1;
  g.heads = 2;
  g.dim = 8;
  g.dropout = 0.0f;
  std::vector<std::vector<float>> ends;
  for (bool sharded : {false, true}) {
    manual_seed(21);
    auto model = std::make_shared<nn::GPT>(9, 4, g);
    DistributedDataParallel ddp(model, comm);
    optim::Adam opt(model->named_parameters(), adam());
    std::unique_ptr<ZeroRedundancyOptimizer> zero;
    if (sharded) zero = std::make_unique<ZeroRedundancyOptimizer>(opt, comm);
    for (int s = 0; s < 3; ++s) {
      std::vector<float> ids(kBatch * 4), next(kBatch * 4);
      for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = static_cast<float>((i * 5 + s) % 9);
        next[i] = static_cast<float>((i * 5 + s + 3) % 9);
      }
      const int64_t per = kBatch / comm.size();
      const Tensor x =
          Tensor::from_host(ids, {kBatch, 4}).slice(0, per * comm.rank(), per * (comm.rank() + 1));
      const Tensor y = Tensor::from_host(next, {kBatch * 4})
                           .slice(0, 4 * per * comm.rank(), 4 * per * (comm.rank() + 1));
      opt.zero_grad();
      cross_entropy(ddp.forward(x).reshape({4 * per, 9}), y).backward();
      opt.step();
    }
    const auto state = model->state_dict();
    EXPECT_TRUE(nn::find(state, "head.weight")->is_same(*nn::find(state, "tok_embed.weight")));
    std::vector<float> all;
    for (const auto& v : values(*model)) all.insert(all.end(), v.begin(), v.end());
    ends.push_back(all);
  }
  ASSERT_EQ(ends[0].size(), ends[1].size());
  EXPECT_EQ(std::memcmp(ends[0].data(), ends[1].data(), ends[0].size() * sizeof(float)), 0);
}
