#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "io/hdf5.hpp"
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
  st.series["data.channel_mean"] = {0.25, -3.0, 1e-300};  // every double as it was
  st.series["empty"] = {};
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
    EXPECT_EQ(st.series, some_state().series);
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

TEST(Checkpoint, OptimizerValuesOutOfRangeLeaveTheModelAsItWas) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::Adam opt_a(a->named_parameters(), optim::AdamOptions{});
  take_steps(*a, opt_a, 2);
  const std::string path = dir.file("a.h5");
  io::save_checkpoint(path, *a, opt_a, some_state());
  {
    io::h5::File f = io::h5::File::open(path, io::h5::File::Mode::ReadWrite);
    f.open_group("/optimizer").set_attribute("beta1", 1.5);
    f.open_group("/optimizer/state/fc1.bias").set_attribute("step", std::nan(""));
  }
  auto b = std::make_shared<Net>();
  optim::Adam opt_b(b->named_parameters(), optim::AdamOptions{});
  auto values = [&] {
    std::vector<std::vector<float>> out;
    for (const auto& [name, t] : b->state_dict()) out.push_back(t.to_vector());
    return out;
  };
  const auto before = values();
  try {
    io::load_checkpoint(path, *b, opt_b);
    ADD_FAILURE() << "the checkpoint loaded";
  } catch (const IOError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("betas (1.5, 0.999)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'fc1.bias/step' = nan"), std::string::npos) << msg;
  }
  // Neither the model nor the optimizer took anything from it.
  EXPECT_EQ(values(), before);
  EXPECT_EQ(opt_b.options().beta1, optim::AdamOptions{}.beta1);
  EXPECT_TRUE(opt_b.state_dict().scalars.empty());
}

TEST(Checkpoint, ATrainingStateNoRunCouldWriteIsRefusedByName) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  const std::string good = dir.file("good.h5");
  io::save_checkpoint(good, *a, opt, some_state());
  // Each corruption of a copy of a good file is refused with the attribute
  // and the file in the message; the good file still loads.
  using Edit = std::function<void(io::h5::File&)>;
  const std::vector<std::pair<std::string, Edit>> cases = {
      {"rng state 'x:100'",
       [](io::h5::File& f) { f.set_attribute("rng_states", std::vector<std::string>{"x:100"}); }},
      {"rng state '5:'",
       [](io::h5::File& f) { f.set_attribute("rng_states", std::vector<std::string>{"5:"}); }},
      {"rng state '5:100 '",
       [](io::h5::File& f) { f.set_attribute("rng_states", std::vector<std::string>{"5:100 "}); }},
      {"rng state '5:-1'",
       [](io::h5::File& f) { f.set_attribute("rng_states", std::vector<std::string>{"5:-1"}); }},
      {"rng state '5:99999999999999999999'",
       [](io::h5::File& f) {
         f.set_attribute("rng_states", std::vector<std::string>{"5:99999999999999999999"});
       }},
      {"epoch = -1", [](io::h5::File& f) { f.set_attribute("epoch", int64_t{-1}); }},
      {"global_step = -5", [](io::h5::File& f) { f.set_attribute("global_step", int64_t{-5}); }},
      {"world_size = 0", [](io::h5::File& f) { f.set_attribute("world_size", int64_t{0}); }},
  };
  int n = 0;
  for (const auto& [what, edit] : cases) {
    const std::string bad = dir.file("bad" + std::to_string(n++) + ".h5");
    std::filesystem::copy_file(good, bad);
    {
      io::h5::File f = io::h5::File::open(bad, io::h5::File::Mode::ReadWrite);
      edit(f);
    }
    try {
      io::read_checkpoint(bad);
      ADD_FAILURE() << what << " was accepted";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(io::read_checkpoint(good).state.rng, some_state().rng);

  // What loading refuses, saving refuses before writing anything.
  io::TrainingState negative = some_state();
  negative.batch_in_epoch = -1;
  const std::string never = dir.file("never.h5");
  try {
    io::save_checkpoint(never, *a, opt, negative);
    ADD_FAILURE() << "batch_in_epoch = -1 was saved";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("batch_in_epoch = -1"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(never));
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
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

namespace {

// A SlicedCheckpoint of `opt`'s state in one process: rank 0 alone makes the
// file and writes its slice (all of it); committed when `commit`.
void save_sliced(const std::string& path, const nn::Module& m, const optim::Optimizer& opt,
                 bool commit = true) {
  io::SlicedCheckpoint file(path, m, opt, *opt.state_layout(), some_state());
  ASSERT_TRUE(io::write_state_slices(file.plan(), opt, 0));
  if (commit) file.commit();
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

// The file a sharded optimizer's ranks write together holds what
// save_checkpoint() writes: the same entries and values, and it resumes alike.
TEST(Checkpoint, ASlicedCheckpointHoldsWhatSaveCheckpointWrites) {
  TempDir dir;
  manual_seed(1);
  auto a = std::make_shared<Net>();
  optim::Adam opt(a->named_parameters(), optim::AdamOptions{});
  take_steps(*a, opt, 3);
  io::save_checkpoint(dir.file("whole.h5"), *a, opt, some_state());
  save_sliced(dir.file("sliced.h5"), *a, opt);
  const io::Checkpoint whole = io::read_checkpoint(dir.file("whole.h5"));
  const io::Checkpoint sliced = io::read_checkpoint(dir.file("sliced.h5"));
  ASSERT_EQ(sliced.model.size(), whole.model.size());
  for (size_t i = 0; i < whole.model.size(); ++i) {
    EXPECT_EQ(sliced.model[i].first, whole.model[i].first);
    EXPECT_EQ(sliced.model[i].second.to_vector(), whole.model[i].second.to_vector());
  }
  EXPECT_EQ(sliced.optimizer.type, whole.optimizer.type);
  EXPECT_EQ(sliced.optimizer.hyperparameters, whole.optimizer.hyperparameters);
  EXPECT_EQ(sliced.optimizer.scalars, whole.optimizer.scalars);
  ASSERT_EQ(sliced.optimizer.tensors.size(), 4u);
  ASSERT_EQ(sliced.optimizer.tensors.size(), whole.optimizer.tensors.size());
  for (const auto& [name, entries] : whole.optimizer.tensors) {
    ASSERT_EQ(sliced.optimizer.tensors.at(name).size(), entries.size()) << name;
    for (const auto& [key, t] : entries) {
      const Tensor& got = sliced.optimizer.tensors.at(name).at(key);
      EXPECT_EQ(got.shape(), t.shape()) << name << "/" << key;
      EXPECT_EQ(got.to_vector(), t.to_vector()) << name << "/" << key;
    }
  }
  EXPECT_EQ(sliced.state.series, whole.state.series);
  EXPECT_EQ(sliced.state.global_step, whole.state.global_step);
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;

  manual_seed(2);
  auto b = std::make_shared<Net>();
  optim::Adam opt_b(b->named_parameters(), optim::AdamOptions{});
  io::load_checkpoint(dir.file("sliced.h5"), *b, opt_b);
  take_steps(*a, opt, 2);
  take_steps(*b, opt_b, 2);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a->named_parameters()[i].second.to_vector(),
              b->named_parameters()[i].second.to_vector());
  }
}

// Nothing reaches the checkpoint's name before the commit: a slice with a NaN,
// a temporary file a rank cannot see, or no commit at all leave the previous
// checkpoint as it was and no temporary file behind.
TEST(Checkpoint, ASlicedCheckpointNotCommittedLeavesThePreviousOne) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::Adam opt(a->named_parameters(), optim::AdamOptions{});
  take_steps(*a, opt, 1);
  const std::string path = dir.file("ckpt.h5");
  io::save_checkpoint(path, *a, opt, some_state());
  const std::string before = contents(path);
  take_steps(*a, opt, 1);

  save_sliced(path, *a, opt, /*commit=*/false);
  EXPECT_EQ(contents(path), before);

  opt.own_state_tensors().at("fc2.weight").at("exp_avg").data()[4] = std::nanf("");
  try {
    save_sliced(path, *a, opt);
    ADD_FAILURE() << "a NaN was written";
  } catch (const NumericalError& e) {
    const std::string what = e.what();
    for (const char* part : {"fc2.weight/exp_avg", "NaN at index 4", "rank 0", "ckpt.h5"}) {
      EXPECT_NE(what.find(part), std::string::npos) << part << " in: " << what;
    }
  }
  EXPECT_EQ(contents(path), before);

  {
    io::SlicedCheckpoint file(path, *a, opt, *opt.state_layout(), some_state());
    // A rank whose checkpoint directory is another file system does not find the file.
    for (const auto& e : dir.entries()) {
      if (e.find(".tmp.") != std::string::npos) std::filesystem::remove(dir.path() / e);
    }
    std::string why;
    EXPECT_FALSE(io::write_state_slices(file.plan(), opt, 3, &why));
    for (const char* part : {"rank 3 cannot open", "ckpt.h5", "one file system"}) {
      EXPECT_NE(why.find(part), std::string::npos) << part << " in: " << why;
    }
  }
  EXPECT_EQ(contents(path), before);
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;
}

TEST(CheckpointDirectory, KeepsTheLastKAndResumesFromTheNewestThatLoads) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  io::CheckpointDirectory cd(dir.file("ckpts"), 2, io::model_settings(*a, opt));
  io::TrainingState st = some_state();
  for (int64_t step : {10, 20, 30}) {
    st.global_step = step;
    cd.save(*a, opt, st);
  }
  const auto files = cd.list();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files[0].find("ckpt-000000020.h5"), std::string::npos);
  EXPECT_NE(files[1].find("ckpt-000000030.h5"), std::string::npos);
  // The newest is damaged: the one before qualifies, and the reason is given.
  std::ofstream(files[1], std::ios::trunc) << "truncated";
  const auto r = cd.newest_resumable(*a, opt);
  EXPECT_EQ(r.path, files[0]);
  EXPECT_EQ(r.checkpoint.state.global_step, 20);
  ASSERT_EQ(r.unusable.size(), 1u);
  EXPECT_EQ(r.unusable[0].first, files[1]);
  EXPECT_NE(r.unusable[0].second.find("not an HDF5 file"), std::string::npos)
      << r.unusable[0].second;
  EXPECT_EQ(cd.list().size(), 2u);  // looking changed nothing
  EXPECT_THROW(io::CheckpointDirectory(dir.file("ckpts/ckpt-000000020.h5/sub"), 2), IOError);
}

namespace {

io::RunConfig config_with_lr(const nn::Module& m, const optim::Optimizer& opt, const char* lr) {
  io::RunConfig c = io::model_settings(m, opt);
  c["lr"] = lr;
  return c;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(CheckpointDirectory, RetentionRemovesOnlyThisConfigurationsCheckpoints) {
  // Another configuration's checkpoints at higher steps than ours: keep-last
  // must count ours only, and never touch theirs.
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  io::CheckpointDirectory theirs(dir.file("d"), 2, config_with_lr(*a, opt, "0.1"));
  io::TrainingState st = some_state();
  for (int64_t step : {400, 500}) {
    st.global_step = step;
    theirs.save(*a, opt, st);
  }
  const std::string their_newest = file_bytes(theirs.path_for(500));
  io::CheckpointDirectory ours(dir.file("d"), 2, config_with_lr(*a, opt, "0.01"));
  for (int64_t step : {1, 2, 3}) {
    st.global_step = step;
    ours.save(*a, opt, st);
  }
  std::vector<std::string> names;
  for (const auto& f : ours.list()) names.push_back(std::filesystem::path(f).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-000000002.h5", "ckpt-000000003.h5",
                                             "ckpt-000000400.h5", "ckpt-000000500.h5"}));
  EXPECT_EQ(file_bytes(theirs.path_for(500)), their_newest);
  EXPECT_TRUE(ours.owns(ours.path_for(3)));
  EXPECT_FALSE(ours.owns(ours.path_for(500)));
  // Resuming passes over theirs with the setting that differs.
  const auto r = ours.newest_resumable(*a, opt);
  EXPECT_EQ(r.path, ours.path_for(3));
  ASSERT_EQ(r.unusable.size(), 2u);
  EXPECT_NE(r.unusable[0].second.find("lr is 0.01 here but 0.1 there"), std::string::npos)
      << r.unusable[0].second;
}

TEST(CheckpointDirectory, BestIsReplacedOnlyByABetterMetricOfTheSameConfiguration) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  io::CheckpointDirectory cd(dir.file("d"), 3, config_with_lr(*a, opt, "0.1"));
  io::TrainingState st = some_state();
  auto best_step = [&] { return io::read_checkpoint_info(cd.best_path()).state.global_step; };
  st.global_step = 1;
  st.values["best_metric"] = 0.80;
  EXPECT_TRUE(cd.save_best(*a, opt, st, /*maximise=*/true));
  st.global_step = 2;
  st.values["best_metric"] = 0.75;  // worse
  EXPECT_FALSE(cd.save_best(*a, opt, st, true));
  EXPECT_EQ(best_step(), 1);
  st.global_step = 3;
  st.values["best_metric"] = 0.85;
  EXPECT_TRUE(cd.save_best(*a, opt, st, true));
  EXPECT_EQ(best_step(), 3);
  // Another configuration never replaces it, however good its metric.
  io::CheckpointDirectory other(dir.file("d"), 3, config_with_lr(*a, opt, "0.5"));
  st.global_step = 4;
  st.values["best_metric"] = 0.99;
  EXPECT_FALSE(other.save_best(*a, opt, st, true));
  EXPECT_EQ(best_step(), 3);
  // An unreadable best.h5 is moved aside, not overwritten.
  std::ofstream(cd.best_path(), std::ios::trunc) << "damaged";
  st.values["best_metric"] = 0.5;
  EXPECT_TRUE(cd.save_best(*a, opt, st, true));
  EXPECT_EQ(file_bytes(cd.rejected_dir() + "/best.h5"), "damaged");
}

TEST(CheckpointDirectory, ConflictsComeFromRunJsonAndFromTheCheckpoints) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  io::CheckpointDirectory first(dir.file("d"), 3, config_with_lr(*a, opt, "0.1"));
  EXPECT_FALSE(first.find_conflict());
  first.claim();
  ASSERT_TRUE(first.recorded_config());
  EXPECT_EQ(*first.recorded_config(), first.config());

  io::CheckpointDirectory second(dir.file("d"), 3, config_with_lr(*a, opt, "0.2"));
  auto c = second.find_conflict();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->source, second.config_path());
  ASSERT_EQ(c->differences.size(), 1u);
  EXPECT_EQ(c->differences[0].name, "lr");
  EXPECT_EQ(c->differences[0].ours, "0.2");
  EXPECT_EQ(c->differences[0].recorded, "0.1");

  // A checkpoint that records no configuration (written before they were
  // recorded) still shows its model: a model of another size conflicts.
  TempDir legacy_dir;
  io::TrainingState st = some_state();
  io::save_checkpoint(legacy_dir.file("ckpt-000000007.h5"), *a, opt, st);  // no run_config
  auto wide = std::make_shared<Net>(16);
  optim::SGD wide_opt(wide->named_parameters(), optim::SGDOptions{});
  io::CheckpointDirectory legacy(legacy_dir.path().string(), 3,
                                 config_with_lr(*wide, wide_opt, "0.1"));
  c = legacy.find_conflict();
  ASSERT_TRUE(c);
  ASSERT_EQ(c->differences.size(), 1u) << io::format_differences(c->differences, "there");
  EXPECT_EQ(c->differences[0].name, "parameters");
  // The same model is no conflict: what the file records agrees.
  io::CheckpointDirectory same(legacy_dir.path().string(), 3, config_with_lr(*a, opt, "0.1"));
  EXPECT_FALSE(same.find_conflict());
}

TEST(CheckpointDirectory, RejectMovesAsideWithoutOverwriting) {
  TempDir dir;
  io::CheckpointDirectory cd(dir.file("d"), 3);
  const std::string p = cd.path_for(5);
  std::ofstream(p) << "one";
  const std::string first = cd.reject(p);
  std::ofstream(p) << "two";
  const std::string second = cd.reject(p);
  EXPECT_NE(first, second);
  EXPECT_EQ(file_bytes(first), "one");
  EXPECT_EQ(file_bytes(second), "two");
  EXPECT_FALSE(std::filesystem::exists(p));
  cd.discard();  // run.json, best.h5 and checkpoints only
  EXPECT_TRUE(std::filesystem::exists(first));
}

TEST(RunConfig, JsonRoundTripAndComparison) {
  const io::RunConfig c = {{"model", "784,256,10"}, {"lr", "0.001"}, {"seed", "0"}};
  EXPECT_EQ(io::run_config_from_json(io::run_config_to_json(c), "x"), c);
  EXPECT_THROW(io::run_config_from_json("{\"format\": \"other\"}", "run.json"), IOError);
  EXPECT_THROW(io::run_config_from_json("not json", "run.json"), IOError);
  // Well-formed JSON of the wrong types is refused in the same way.
  for (const char* bad :
       {"[]", "{\"format\": 5, \"settings\": {}}", "{\"format\": \"kdp-run-config\"}",
        "{\"format\": \"kdp-run-config\", \"settings\": []}",
        "{\"format\": \"kdp-run-config\", \"version\": \"1\", \"settings\": {}}",
        "{\"format\": \"kdp-run-config\", \"version\": 2, \"settings\": {}}",
        "{\"format\": \"kdp-run-config\", \"settings\": {\"lr\": 0.1}}"}) {
    try {
      io::run_config_from_json(bad, "run.json");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("'run.json'"), std::string::npos) << e.what();
    }
  }
  io::RunConfig d = c;
  d["lr"] = "0.01";
  d.erase("seed");
  d["batch-size"] = "64";
  const auto diff = io::compare_run_configs(c, d);
  ASSERT_EQ(diff.size(), 3u);
  EXPECT_EQ(diff[0].name, "batch-size");
  EXPECT_EQ(diff[0].ours, "(not set)");
  EXPECT_EQ(diff[1].name, "lr");
  EXPECT_EQ(diff[2].name, "seed");
  EXPECT_EQ(diff[2].recorded, "(not recorded)");
  // A partial record compares what it has.
  EXPECT_EQ(io::compare_run_configs(c, {{"lr", "0.001"}}, true).size(), 0u);
  const std::string table = io::format_differences(diff, "recorded");
  EXPECT_NE(table.find("lr          0.001      0.01\n"), std::string::npos) << table;
}

TEST(Checkpoint, NonFiniteValuesAreNeverWrittenAndRefusedOnLoad) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::Adam opt_a(a->named_parameters(), optim::AdamOptions{});
  take_steps(*a, opt_a, 2);
  const std::string good = dir.file("good.h5");
  io::save_checkpoint(good, *a, opt_a, some_state());

  // Saving: a NaN weight or an Inf in the optimizer state writes nothing.
  auto poisoned = std::make_shared<Net>();
  poisoned->load_state_dict(a->state_dict());
  {
    NoGradGuard no_grad;
    Tensor weight = poisoned->fc2->weight();
    std::vector<float> w = weight.to_vector();
    w[4] = std::nanf("");
    weight.copy_(Tensor::from_host(w, weight.shape()));
  }
  optim::Adam opt_p(poisoned->named_parameters(), optim::AdamOptions{});
  try {
    io::save_checkpoint(dir.file("nan.h5"), *poisoned, opt_p, some_state());
    ADD_FAILURE() << "a NaN weight was saved";
  } catch (const NumericalError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'fc2.weight' holds NaN at index 4 (position [0, 4])"), std::string::npos)
        << m;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("nan.h5")));
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp."), std::string::npos) << e;

  // Loading: a file whose model or optimizer state holds a NaN or an Inf is
  // refused naming the entry and the first bad position; nothing changes.
  for (const std::string entry : {"/model/fc1.bias", "/optimizer/state/fc2.weight/exp_avg"}) {
    const std::string bad = dir.file("bad.h5");
    std::filesystem::copy_file(good, bad, std::filesystem::copy_options::overwrite_existing);
    {
      io::h5::File f = io::h5::File::open(bad, io::h5::File::Mode::ReadWrite);
      io::h5::Dataset d = f.open_dataset(entry);
      std::vector<float> v = d.read_all<float>();
      v[2] = entry == "/model/fc1.bias" ? INFINITY : std::nanf("");
      d.write_all(v.data());
    }
    auto b = std::make_shared<Net>();
    optim::Adam opt_b(b->named_parameters(), optim::AdamOptions{});
    const std::vector<float> before = b->fc1->bias().to_vector();
    try {
      io::load_checkpoint(bad, *b, opt_b);
      ADD_FAILURE() << "a checkpoint with a non-finite value in " << entry << " loaded";
    } catch (const IOError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(entry), std::string::npos) << m;
      EXPECT_NE(m.find(entry == "/model/fc1.bias" ? "Inf at index 2" : "NaN at index 2"),
                std::string::npos)
          << m;
    }
    EXPECT_EQ(b->fc1->bias().to_vector(), before);
    EXPECT_THROW(io::read_checkpoint(bad), IOError);
  }
}

TEST(Checkpoint, TensorsOfSeveralMegabytesLoadInPiecesEachChecked) {
  // fc1.weight holds 300000 values: more than one piece of the rank's threads'
  // reads (2^18 values). Every value comes back bit for bit, and a NaN in the
  // second piece is found and named by its index in the whole tensor.
  TempDir dir;
  manual_seed(3);
  auto a = std::make_shared<Net>(60000);
  optim::Adam opt_a(a->named_parameters(), optim::AdamOptions{});
  take_steps(*a, opt_a, 1);
  const std::string good = dir.file("big.h5");
  io::save_checkpoint(good, *a, opt_a, some_state());
  {
    // kdp writes contiguous float32, which host memory takes straight from
    // the file; chunked or other types go through HDF5.
    io::h5::File f = io::h5::File::open(good);
    EXPECT_TRUE(f.open_dataset("/model/fc1.weight").native_float_offset().has_value());
    io::h5::File other = io::h5::File::create(dir.file("other.h5"));
    EXPECT_FALSE(other.create_dataset("chunked", io::h5::Type::Float32, {8, 4}, 2)
                     .native_float_offset()
                     .has_value());
    EXPECT_FALSE(other.create_dataset_allocated("doubles", io::h5::Type::Float64, {8})
                     .native_float_offset()
                     .has_value());
    EXPECT_TRUE(other.create_dataset_allocated("floats", io::h5::Type::Float32, {8})
                    .native_float_offset()
                    .has_value());
  }
  auto b = std::make_shared<Net>(60000);
  optim::Adam opt_b(b->named_parameters(), optim::AdamOptions{});
  io::load_checkpoint(good, *b, opt_b);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a->named_parameters()[i].second.to_vector(),
              b->named_parameters()[i].second.to_vector())
        << a->named_parameters()[i].first;
  }
  const auto sa = opt_a.state_dict(), sb = opt_b.state_dict();
  EXPECT_EQ(sa.tensors.at("fc1.weight").at("exp_avg_sq").to_vector(),
            sb.tensors.at("fc1.weight").at("exp_avg_sq").to_vector());
  {
    io::h5::File f = io::h5::File::open(good, io::h5::File::Mode::ReadWrite);
    io::h5::Dataset d = f.open_dataset("/model/fc1.weight");
    std::vector<float> v = d.read_all<float>();
    v[290003] = std::nanf("");
    d.write_all(v.data());
  }
  auto c = std::make_shared<Net>(60000);
  optim::Adam opt_c(c->named_parameters(), optim::AdamOptions{});
  const std::vector<float> before = c->fc1->weight().to_vector();
  try {
    io::load_checkpoint(good, *c, opt_c);
    ADD_FAILURE() << "a checkpoint with a NaN in its second piece loaded";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("'/model/fc1.weight' in '" + good +
                                         "' holds NaN at index 290003 (position [58000, 3])"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(c->fc1->weight().to_vector(), before);
}

TEST(Checkpoint, IsCheckpointFileTellsKdpCheckpointsFromOtherFiles) {
  TempDir dir;
  auto a = std::make_shared<Net>();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  io::save_checkpoint(dir.file("c.h5"), *a, opt, some_state());
  EXPECT_TRUE(io::is_checkpoint_file(dir.file("c.h5")));
  {
    io::h5::File f = io::h5::File::create(dir.file("data.h5"));
    f.set_attribute("format", "kdp-dataset");
  }
  std::string why;
  EXPECT_FALSE(io::is_checkpoint_file(dir.file("data.h5"), &why));
  EXPECT_NE(why.find("not a kdp checkpoint"), std::string::npos) << why;
  std::ofstream(dir.file("text.h5")) << "hello";
  EXPECT_FALSE(io::is_checkpoint_file(dir.file("text.h5")));
  EXPECT_FALSE(io::is_checkpoint_file(dir.file("missing.h5")));
}

TEST(FileLock, ASecondHolderIsRefusedUntilTheFirstReleases) {
  TempDir dir;
  const std::string path = dir.file("lock");
  io::FileLock first = io::FileLock::try_acquire(path);
  ASSERT_TRUE(first.held()) << first.reason();
  EXPECT_TRUE(first.created());
  first.record_owner();
  EXPECT_NE(io::FileLock::owner(path).find(fmt::format("pid {} on host ", ::getpid())),
            std::string::npos)
      << io::FileLock::owner(path);
  // flock() conflicts between open files, in one process as between two.
  io::FileLock second = io::FileLock::try_acquire(path);
  EXPECT_FALSE(second.held());
  EXPECT_TRUE(second.busy());
  EXPECT_FALSE(second.created());
  // The holder, from /proc/locks, is named as the owner line names it.
  EXPECT_EQ(io::FileLock::holder(path) + "\n", [&] {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }());
  first.release();
  io::FileLock third = io::FileLock::try_acquire(path);
  EXPECT_TRUE(third.held());
  EXPECT_TRUE(io::FileLock::holder(dir.file("nobody")).empty());
}

TEST(FileLock, ALockFileRemovedOnReleaseIsNeverHeldTwice) {
  TempDir dir;
  const std::string path = dir.file("lock");
  {
    io::FileLock a = io::FileLock::try_acquire(path);
    ASSERT_TRUE(a.held());
    a.remove_when_released(true);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  io::FileLock b = io::FileLock::try_acquire(path);
  io::FileLock c = io::FileLock::try_acquire(path);
  EXPECT_TRUE(b.held());
  EXPECT_TRUE(c.busy());
  EXPECT_THROW(io::FileLock::try_acquire(dir.path().string()), IOError);  // a directory
}

TEST(CheckpointDirectory, ARunHoldsItsDirectoryAndASecondIsRefusedNamingTheFirst) {
  TempDir dir;
  io::CheckpointDirectory d(dir.file("ckpt"));
  io::FileLock held = d.lock();
  ASSERT_TRUE(held.held());
  io::CheckpointDirectory other(dir.file("ckpt"));
  try {
    other.lock();
    ADD_FAILURE() << "a second lock was taken";
  } catch (const io::RunDirectoryError& e) {
    EXPECT_EQ(e.reason(), io::RunDirectoryError::Reason::InUse);
    const std::string m = e.what();
    EXPECT_NE(m.find("is in use by another run (pid " + std::to_string(::getpid()) + " on host "),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(", started 20"), std::string::npos) << m;
  }
  held.release();
  EXPECT_FALSE(std::filesystem::exists(d.lock_path()));  // gone with its holder
  EXPECT_TRUE(other.lock().held());
}

TEST(CheckpointDirectory, OrphanedTemporaryFilesOfDeadWritersAreRemoved) {
  TempDir dir;
  io::CheckpointDirectory d(dir.file("ckpt"));
  // A writer that has ended: a child process, waited for.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  auto write = [&](const std::string& name, size_t bytes) {
    std::ofstream(dir.file("ckpt/" + name)) << std::string(bytes, 'x');
  };
  write(fmt::format(".ckpt-000000007.h5.tmp.{}.0", child), 1000);
  write(fmt::format(".best.h5.tmp.{}.3", child), 500);
  write(fmt::format(".ckpt-000000008.h5.tmp.{}.0", ::getpid()), 10);  // a live writer
  write("notes.tmp.1.txt", 10);                                       // not a temporary
  const io::CheckpointDirectory::Removed removed = d.remove_orphaned_temporaries();
  EXPECT_EQ(removed.files, 2);
  EXPECT_EQ(removed.bytes, 1500u);
  EXPECT_TRUE(std::filesystem::exists(
      dir.file(fmt::format("ckpt/.ckpt-000000008.h5.tmp.{}.0", ::getpid()))));
  EXPECT_TRUE(std::filesystem::exists(dir.file("ckpt/notes.tmp.1.txt")));
  EXPECT_EQ(d.remove_orphaned_temporaries().files, 0);
}

TEST(CheckpointDirectory, OverwriteAndSavesNeverDestroyFilesThatAreNotCheckpoints) {
  TempDir dir;
  auto m = std::make_shared<Net>();
  optim::SGD opt(m->named_parameters(), optim::SGDOptions{});
  io::CheckpointDirectory d(dir.file("ckpt"), 3, {{"model", "net"}});
  io::TrainingState st = some_state();
  st.global_step = 5;
  d.save(*m, opt, st);
  d.claim();
  // A dataset under a checkpoint's name, and a file of the user's as best.h5.
  const std::string foreign = d.path_for(9);
  {
    io::h5::File f = io::h5::File::create(foreign);
    f.set_attribute("format", "kdp-dataset");
  }
  std::ofstream(d.best_path()) << "my notes";
  const auto kept = d.discard();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, foreign);
  EXPECT_EQ(kept[1].first, d.best_path());
  EXPECT_TRUE(std::filesystem::exists(foreign));
  EXPECT_TRUE(std::filesystem::exists(d.best_path()));
  EXPECT_FALSE(std::filesystem::exists(d.path_for(5)));
  EXPECT_FALSE(std::filesystem::exists(d.config_path()));
  // A save under the foreign file's name moves it to rejected/ first.
  st.global_step = 9;
  d.save(*m, opt, st);
  EXPECT_TRUE(io::is_checkpoint_file(d.path_for(9)));
  EXPECT_TRUE(std::filesystem::exists(dir.file("ckpt/rejected/ckpt-000000009.h5")));
}

TEST(Checkpoint, BatchNormBuffersRoundTripWithTheCountAsInt64) {
  TempDir dir;
  auto make = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 2, 3), std::make_shared<nn::BatchNorm2d>(2)});
  };
  auto a = make();
  for (int i = 0; i < 3; ++i)
    a->forward(test::random_tensor({4, 1, 5, 5}, static_cast<uint64_t>(i)));
  optim::Adadelta opt(a->named_parameters());
  io::save_checkpoint(dir.file("bn.h5"), *a, opt, some_state());
  {
    io::h5::File f = io::h5::File::open(dir.file("bn.h5"));
    const io::h5::Dataset count = f.open_dataset("/model/1.num_batches_tracked");
    EXPECT_EQ(count.type(), io::h5::Type::Int64);  // as PyTorch stores it
    EXPECT_EQ(count.dims(), std::vector<int64_t>{});
    EXPECT_EQ(count.read_all<int64_t>(), std::vector<int64_t>{3});
    EXPECT_EQ(f.open_dataset("/model/1.running_var").type(), io::h5::Type::Float32);
  }
  auto b = make();
  optim::Adadelta opt_b(b->named_parameters());
  io::load_checkpoint(dir.file("bn.h5"), *b, opt_b);
  const auto loaded = b->state_dict();
  for (const auto& [name, t] : a->state_dict()) {
    EXPECT_EQ(nn::find(loaded, name)->to_vector(), t.to_vector()) << name;
  }
}

TEST(Checkpoint, AFileWrittenByPythonLoads) {
  // docs/checkpoint-format.md's recipe for outside writers, followed by a
  // Python program with h5py alone.
  if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0) {
    GTEST_SKIP() << "no h5py for /usr/bin/python3";
  }
  TempDir dir;
  const std::string path = dir.file("from_python.h5");
  const std::string script = std::string(KDP_TESTS_SOURCE_DIR) + "/io/write_checkpoint_h5py.py";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + path + " > /dev/null").c_str()), 0);
  auto net = nn::build_layer_list(
      nn::parse_layer_list("conv(4,3),batchnorm,relu,maxpool(2),flatten,linear(10)"),
      Shape{1, 28, 28});
  optim::SGD opt(net->named_parameters(), optim::SGDOptions{0.01, 0.9});
  io::load_checkpoint(path, *net, opt);
  int k = 0;
  for (const auto& [key, t] : net->state_dict()) {
    const std::vector<float> v = t.to_vector();
    for (size_t i = 0; i < v.size(); ++i) {
      float want = key.find("num_batches_tracked") != std::string::npos
                       ? 7.0f
                       : static_cast<float>(std::sin(1.0 + 0.1 * static_cast<double>(i) + k));
      if (key.find("running_var") != std::string::npos) want = std::fabs(want) + 0.5f;
      ASSERT_NEAR(v[i], want, 1e-6) << key << "[" << i << "]";
    }
    ++k;
  }
}
