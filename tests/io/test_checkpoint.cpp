#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>
#include <fstream>

#include "temp_dir.hpp"
#include "test_util.hpp"

using namespace kdp;
using kdp::test::TempDir;

namespace {

class Net : public nn::Module {
 public:
  Net(int64_t hidden = 8) : Module("Net") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(5, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, 3));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
  using Module::forward;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

void take_steps(nn::Module& m, optim::Optimizer& opt, int steps) {
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    cross_entropy(m.forward(test::random_tensor({6, 5}, static_cast<uint64_t>(s))),
                  Tensor::from_host({0, 1, 2, 0, 1, 2}, {6}))
        .backward();
    opt.step();
  }
}

io::TrainingState some_state() {
  io::TrainingState st;
  st.epoch = 3;
  st.global_step = 42;
  st.batch_in_epoch = 7;
  st.sampler_seed = 11;
  st.rng = {{5, 100}, {6, 200}};
  st.world_size = 2;
  st.devices_per_rank = 2;
  st.values["best_metric"] = 0.5;
  return st;
}

}  // namespace

TEST(Checkpoint, RoundTripOfModelOptimizerAndTrainingState) {
  TempDir dir;
  for (const std::string kind : {"sgd", "adam"}) {
    manual_seed(1);
    auto a = std::make_shared<Net>();
    std::unique_ptr<optim::Optimizer> opt_a;
    if (kind == "sgd") {
      opt_a = std::make_unique<optim::SGD>(a->named_parameters(), optim::SGDOptions{0.1, 0.9});
    } else {
      opt_a = std::make_unique<optim::Adam>(a->named_parameters(), optim::AdamOptions{});
    }
    take_steps(*a, *opt_a, 3);
    const std::string path = dir.file(kind + ".h5");
    io::save_checkpoint(path, *a, *opt_a, some_state());

    manual_seed(2);
    auto b = std::make_shared<Net>();
    std::unique_ptr<optim::Optimizer> opt_b;
    if (kind == "sgd") {
      opt_b = std::make_unique<optim::SGD>(b->named_parameters(), optim::SGDOptions{0.5, 0.1});
    } else {
      opt_b = std::make_unique<optim::Adam>(b->named_parameters(), optim::AdamOptions{});
    }
    const io::TrainingState st = io::load_checkpoint(path, *b, *opt_b);
    EXPECT_EQ(st.epoch, 3);
    EXPECT_EQ(st.global_step, 42);
    EXPECT_EQ(st.batch_in_epoch, 7);
    EXPECT_EQ(st.rng, (std::vector<std::pair<uint64_t, uint64_t>>{{5, 100}, {6, 200}}));
    EXPECT_EQ(st.world_size, 2);
    EXPECT_EQ(st.values.at("best_metric"), 0.5);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(a->named_parameters()[i].second.to_vector(),
                b->named_parameters()[i].second.to_vector());
    }
    EXPECT_EQ(opt_b->lr(), opt_a->lr());
    // Identical state: the next steps are bit-identical.
    take_steps(*a, *opt_a, 2);
    take_steps(*b, *opt_b, 2);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(a->named_parameters()[i].second.to_vector(),
                b->named_parameters()[i].second.to_vector())
          << kind;
    }
  }
}

TEST(Checkpoint, ADefaultTrainingStateRoundTrips) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  io::save_checkpoint(dir.file("c.h5"), *a, opt, io::TrainingState{});  // no generators, no values
  const io::Checkpoint c = io::read_checkpoint(dir.file("c.h5"));
  EXPECT_TRUE(c.state.rng.empty());
  EXPECT_EQ(c.state.global_step, 0);
  EXPECT_EQ(c.model.size(), 4u);
}

TEST(Checkpoint, LayoutUsesPyTorchKeysAndShapes) {
  TempDir dir;
  auto seq = nn::mlp({5, 8, 3});
  optim::Adam opt(seq->named_parameters(), optim::AdamOptions{});
  take_steps(*seq, opt, 1);
  const std::string path = dir.file("seq.h5");
  io::save_checkpoint(path, *seq, opt, some_state());
  io::h5::File f = io::h5::File::open(path);
  EXPECT_EQ(f.open_dataset("/model/0.weight").dims(), (std::vector<int64_t>{8, 5}));
  EXPECT_EQ(f.open_dataset("/model/2.bias").dims(), (std::vector<int64_t>{3}));
  EXPECT_EQ(f.open_dataset("/optimizer/state/0.weight/exp_avg").dims(),
            (std::vector<int64_t>{8, 5}));
  EXPECT_EQ(f.open_group("/optimizer/state/0.weight").attribute_double("step"), 1.0);
  EXPECT_EQ(f.attribute_string("format"), "kdp-checkpoint");
  EXPECT_EQ(f.attribute_string("model_signature"), io::model_signature(seq->state_dict()));
}

TEST(Checkpoint, LoadingIntoAnotherModelReportsEveryMismatch) {
  TempDir dir;
  auto a = std::make_shared<Net>(8);
  optim::SGD opt_a(a->named_parameters(), optim::SGDOptions{});
  const std::string path = dir.file("a.h5");
  io::save_checkpoint(path, *a, opt_a, some_state());
  auto b = std::make_shared<Net>(16);
  optim::SGD opt_b(b->named_parameters(), optim::SGDOptions{});
  try {
    io::load_checkpoint(path, *b, opt_b);
    FAIL() << "expected IOError";
  } catch (const IOError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("'fc1.weight' is [8, 5] in the checkpoint but [16, 5]"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("'fc2.weight' is [3, 8] in the checkpoint but [3, 16]"), std::string::npos)
        << msg;
  }
  optim::Adam adam(a->named_parameters(), optim::AdamOptions{});
  EXPECT_THROW(io::load_checkpoint(path, *a, adam), IOError);  // the optimizer differs
  std::ofstream(dir.file("junk.h5")) << "not hdf5";
  EXPECT_THROW(io::load_checkpoint(dir.file("junk.h5"), *a, opt_a), IOError);
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpoint) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  const std::string path = dir.file("ckpt.h5");
  io::save_checkpoint(path, *a, opt, some_state());
  std::ifstream in(path, std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A full disk, played by a file-size limit: the write fails part-way.
  auto big = nn::mlp({300, 300, 3});
  optim::SGD big_opt(big->named_parameters(), optim::SGDOptions{});
  struct rlimit old_limit;
  getrlimit(RLIMIT_FSIZE, &old_limit);
  struct rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
  setrlimit(RLIMIT_FSIZE, &small);
  try {
    io::save_checkpoint(path, *big, big_opt, some_state());
    ADD_FAILURE() << "the save should have failed";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt.h5"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  std::ifstream again(path, std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(again)),
                          std::istreambuf_iterator<char>());
  EXPECT_EQ(after, before);
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
}

TEST(CheckpointDirectory, KeepsTheLastKAndResumesFromTheNewestThatLoads) {
  TempDir dir;
  io::CheckpointDirectory cd(dir.file("ckpts"), 2);
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  io::TrainingState st = some_state();
  for (int64_t step : {10, 20, 30}) {
    st.global_step = step;
    cd.save(*a, opt, st);
  }
  const auto files = cd.list();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files[0].find("ckpt-000000020.h5"), std::string::npos);
  EXPECT_NE(files[1].find("ckpt-000000030.h5"), std::string::npos);
  // The newest is damaged: resume takes the one before and says why.
  std::ofstream(files[1], std::ios::trunc) << "truncated";
  std::vector<std::string> skipped;
  auto loaded = cd.load_newest(*a, opt, &skipped);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->state.global_step, 20);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("ckpt-000000030.h5"), std::string::npos);
  EXPECT_THROW(io::CheckpointDirectory(dir.file("ckpts/ckpt-000000020.h5/sub"), 2), IOError);
}
