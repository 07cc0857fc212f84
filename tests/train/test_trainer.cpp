#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "io/hdf5.hpp"
#include "temp_dir.hpp"
#include "test_util.hpp"

using namespace kdp;
using kdp::test::TempDir;

namespace {

// A small classifier with dropout, so that resuming must restore the generator.
std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(7);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(0.2f), std::make_shared<nn::Linear>(16, 3)});
}

struct TrainingRun {
  std::shared_ptr<nn::Sequential> model = make_model();
  std::shared_ptr<data::TensorDataset> train_set = data::synthetic_classification(96, 6, 3, 1);
  std::shared_ptr<data::TensorDataset> val_set = data::synthetic_classification(40, 6, 3, 2);
  std::unique_ptr<data::DataLoader> train_loader, val_loader;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::StepLR> sched;

  explicit TrainingRun(int64_t batch = 16) {
    data::DataLoaderOptions o;
    o.batch_size = batch;
    train_loader = std::make_unique<data::DataLoader>(
        train_set, std::make_shared<data::RandomSampler>(train_set->size(), 3), o);
    val_loader = std::make_unique<data::DataLoader>(
        val_set, std::make_shared<data::SequentialSampler>(val_set->size()), o);
    opt = std::make_unique<optim::SGD>(model->named_parameters(), optim::SGDOptions{0.1, 0.9});
    sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
  }

  train::FitResult fit(train::TrainerOptions t) {
    train::Trainer trainer(t, dist::Communicator::world());
    nn::CrossEntropyLoss ce;
    return trainer.fit(*model, std::ref(ce), *opt, *train_loader, val_loader.get(), sched.get());
  }

  std::vector<std::vector<float>> params() const {
    std::vector<std::vector<float>> out;
    for (auto& [n, p] : model->named_parameters()) out.push_back(p.to_vector());
    return out;
  }
};

io::RunDirectoryError::Reason refusal(const train::TrainerOptions& t) {
  try {
    TrainingRun{}.fit(t);
  } catch (const io::RunDirectoryError& e) {
    return e.reason();
  }
  ADD_FAILURE() << "the run started";
  return io::RunDirectoryError::Reason::OtherConfiguration;
}

train::TrainerOptions quiet() {
  train::TrainerOptions t;
  t.progress = 0;
  t.log_every_steps = 1000000;
  return t;
}

}  // namespace

TEST(Trainer, ResumingGivesBitIdenticalParameters) {
  TempDir dir;
  TrainingRun straight;
  train::TrainerOptions t = quiet();
  t.epochs = 4;
  straight.fit(t);

  // 2 epochs, stop; a new process (fresh objects) resumes and trains 2 more.
  t.checkpoint_dir = dir.file("ckpt");
  {
    TrainingRun first;
    t.epochs = 2;
    first.fit(t);
  }
  TrainingRun second;
  t.epochs = 4;
  t.resume = "auto";
  const train::FitResult r = second.fit(t);
  EXPECT_NE(r.resumed_from.find("ckpt-"), std::string::npos);
  EXPECT_EQ(r.history.size(), 2u);
  EXPECT_EQ(second.params(), straight.params());
  EXPECT_EQ(second.opt->lr(), straight.opt->lr());  // the scheduler came back too
}

TEST(Trainer, ResumingMidEpochGivesBitIdenticalParameters) {
  TempDir dir;
  TrainingRun straight;
  train::TrainerOptions t = quiet();
  t.epochs = 2;
  straight.fit(t);

  t.checkpoint_dir = dir.file("ckpt");
  {
    TrainingRun first;
    t.max_steps = 9;  // 6 batches per epoch: stops inside the second epoch
    const train::FitResult r = first.fit(t);
    EXPECT_EQ(r.global_step, 9);
  }
  TrainingRun second;
  t.max_steps = -1;
  t.resume = "auto";
  second.fit(t);
  EXPECT_EQ(second.params(), straight.params());
}

// bf16 products change the trajectory a little and nothing else: the weights
// stay fp32 near the fp32 run's, the checkpoints are the same kind (a bf16 run
// resumes from them bit for bit, and so could an fp32 one), evaluation runs in
// the precision too.
TEST(Trainer, Bf16TrainsNearFp32AndResumesBitIdentically) {
  TempDir dir;
  train::TrainerOptions t = quiet();
  t.epochs = 2;
  TrainingRun fp32;
  fp32.fit(t);
  t.precision = Precision::bf16;
  TrainingRun straight;
  const train::FitResult r = straight.fit(t);
  EXPECT_EQ(r.precision, Precision::bf16);
  const auto a = fp32.params(), b = straight.params();
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t k = 0; k < a[i].size(); ++k) {
      differ += a[i][k] != b[i][k];
      // 12 steps of lr 0.1 from gradients with bf16's relative error (2^-8
      // per operand): far below the weights' own size.
      EXPECT_NEAR(a[i][k], b[i][k], 0.05f) << "parameter " << i << " element " << k;
    }
  }
  EXPECT_GT(differ, 0u) << "bf16 ran as fp32";

  t.checkpoint_dir = dir.file("ckpt");
  {
    TrainingRun first;
    t.max_steps = 9;
    first.fit(t);
  }
  TrainingRun second;
  t.max_steps = -1;
  t.resume = "auto";
  second.fit(t);
  EXPECT_EQ(second.params(), straight.params());
}

TEST(Trainer, AutoPrecisionIsBf16ExactlyWhereTheDeviceHasMatrixUnits) {
  train::TrainerOptions t = quiet();
  t.precision = Precision::Auto;
  t.epochs = 1;
  train::Trainer trainer(t, dist::Communicator::world());
  EXPECT_EQ(trainer.precision(), has_bf16_matrix_units() ? Precision::bf16 : Precision::fp32);
  TrainingRun run;
  EXPECT_EQ(run.fit(t).precision, trainer.precision());
}

TEST(Trainer, ASignalStopsAfterTheStepWithACheckpointAndResumeFinishes) {
  TempDir dir;
  TrainingRun straight;
  train::TrainerOptions t = quiet();
  t.epochs = 2;
  straight.fit(t);

  t.checkpoint_dir = dir.file("ckpt");
  int calls = 0;
  train::FitResult stopped;
  {
    TrainingRun first;
    train::Trainer trainer(t, dist::Communicator::world());
    nn::CrossEntropyLoss ce;
    auto loss = [&](const Tensor& out, const Tensor& y) {
      if (++calls == 4) std::raise(SIGUSR1);  // as a scheduler's warning would
      return ce(out, y);
    };
    stopped = trainer.fit(*first.model, loss, *first.opt, *first.train_loader,
                          first.val_loader.get(), first.sched.get());
  }
  EXPECT_TRUE(stopped.stopped_by_signal);
  EXPECT_EQ(stopped.signal, SIGUSR1);
  EXPECT_EQ(stopped.global_step, 4);  // the step in progress was finished
  EXPECT_NE(stopped.last_checkpoint.find("ckpt-000000004.h5"), std::string::npos);

  TrainingRun second;
  t.resume = "auto";
  second.fit(t);
  EXPECT_EQ(second.params(), straight.params());
}

TEST(Trainer, GradientAccumulationEqualsTheLargerBatch) {
  // Two micro-batches of 8 with the loss halved give the gradient of the batch
  // of 16 they make up (the sampler's order is the same): the parameters agree
  // to float rounding of the differently grouped sums.
  auto train_with = [](int64_t batch, int64_t accumulate) {
    TrainingRun run(batch);
    manual_seed(9);
    run.model = nn::mlp({6, 16, 3});  // no dropout: both runs compute the same function
    run.opt = std::make_unique<optim::SGD>(run.model->named_parameters(), optim::SGDOptions{0.1});
    train::TrainerOptions t = quiet();
    t.epochs = 2;
    t.accumulate_grad_batches = accumulate;
    train::Trainer trainer(t, dist::Communicator::world());
    nn::CrossEntropyLoss ce;
    const train::FitResult r = trainer.fit(*run.model, std::ref(ce), *run.opt, *run.train_loader);
    EXPECT_EQ(r.global_step, 12);  // 96 samples / 16 per step, 2 epochs
    return run.params();
  };
  const auto big = train_with(16, 1);
  const auto accumulated = train_with(8, 2);
  ASSERT_EQ(big.size(), accumulated.size());
  for (size_t i = 0; i < big.size(); ++i) test::expect_close(accumulated[i], big[i], 1e-6, 1e-5);
}

namespace {

// A gradient exchange of a user's own: it exchanges nothing, and notes
// whether exchanging was on at each forward (the Trainer pauses it for all
// but the last micro-batch of a step) and how often it ran at all.
class NotingExchange : public nn::Module, public nn::GradientExchange {
 public:
  explicit NotingExchange(std::shared_ptr<nn::Module> inner)
      : Module("NotingExchange"), inner_(std::move(inner)) {
    register_module("module", inner_);
  }
  Tensor forward(const Tensor& x) override {
    states.push_back(on_);
    return inner_->forward(x);
  }
  using Module::forward;
  std::shared_ptr<nn::Module> wrapped() const override { return inner_; }
  nn::GradientExchange* gradient_exchange() override { return this; }
  bool exchanging() const override { return on_; }
  void set_exchanging(bool on) override { on_ = on; }
  void finish() override {}
  double comm_wait_seconds() const override { return 0.0; }
  nn::Module& local_module() override { return *inner_; }
  bool keeps_gradient_storage() const override { return false; }

  std::vector<bool> states;

 private:
  std::shared_ptr<nn::Module> inner_;
  bool on_ = true;
};

}  // namespace

TEST(Trainer, DrivesAnyGradientExchangeThroughItsInterface) {
  TrainingRun run(8);
  auto exchange = std::make_shared<NotingExchange>(run.model);
  train::TrainerOptions t = quiet();
  t.epochs = 1;
  t.accumulate_grad_batches = 3;  // 12 micro-batches of 8: 4 steps
  train::Trainer trainer(t, dist::Communicator::world());
  nn::CrossEntropyLoss ce;
  const train::FitResult r =
      trainer.fit(*exchange, std::ref(ce), *run.opt, *run.train_loader, run.val_loader.get());
  EXPECT_EQ(r.global_step, 4);
  // Paused for the first two micro-batches of each step, on for the third;
  // evaluation ran the local module, not the exchange.
  std::vector<bool> want;
  for (int step = 0; step < 4; ++step) want.insert(want.end(), {false, false, true});
  EXPECT_EQ(exchange->states, want);
  EXPECT_TRUE(exchange->exchanging());
}

TEST(Trainer, EarlyStoppingAndBestCheckpoint) {
  TempDir dir;
  TrainingRun run;
  run.opt->set_lr(0.0);  // nothing changes, so the monitored loss never improves
  run.sched.reset();
  train::TrainerOptions t = quiet();
  t.epochs = 10;
  t.early_stopping_patience = 2;
  t.checkpoint_dir = dir.file("ckpt");
  train::Trainer trainer(t, dist::Communicator::world());
  nn::CrossEntropyLoss ce;
  const train::FitResult r =
      trainer.fit(*run.model, std::ref(ce), *run.opt, *run.train_loader, run.val_loader.get());
  EXPECT_TRUE(r.early_stopped);
  EXPECT_EQ(r.epochs_completed, 3);  // the first sets the best, two more without improvement
  EXPECT_FALSE(r.best_checkpoint.empty());
  EXPECT_EQ(io::read_checkpoint(r.best_checkpoint).state.epoch, 1);
}

TEST(Trainer, EvaluateCountsEverySampleOnce) {
  TrainingRun run;
  train::Trainer trainer(quiet(), dist::Communicator::world());
  nn::CrossEntropyLoss ce;
  const train::EvalResult e = trainer.evaluate(*run.model, std::ref(ce), *run.val_loader);
  EXPECT_EQ(e.count, 40);
  // Against a direct computation over the whole validation set.
  std::vector<int64_t> all(40);
  for (int64_t i = 0; i < 40; ++i) all[static_cast<size_t>(i)] = i;
  std::vector<float> x(40 * 6), y(40);
  run.val_set->fetch(all, x.data(), y.data());
  run.model->eval();
  NoGradGuard no_grad;
  Tensor out = run.model->forward(Tensor::from_host(x, {40, 6}));
  EXPECT_NEAR(e.loss, cross_entropy(out, Tensor::from_host(y, {40})).item(), 1e-5);
  const auto pred = argmax(out, 1).to_vector();
  int correct = 0;
  for (int i = 0; i < 40; ++i) correct += pred[static_cast<size_t>(i)] == y[static_cast<size_t>(i)];
  EXPECT_DOUBLE_EQ(e.accuracy, correct / 40.0);
}

TEST(Trainer, NanLossStopsBeforeTheStepAndNamesIt) {
  TempDir dir;
  TrainingRun run;
  train::TrainerOptions t = quiet();
  t.epochs = 3;
  t.checkpoint_dir = dir.file("ckpt");
  train::Trainer trainer(t, dist::Communicator::world());
  nn::CrossEntropyLoss ce;
  int calls = 0;
  auto loss = [&](const Tensor& out, const Tensor& y) {
    Tensor l = ce(out, y);
    return ++calls == 9 ? l * std::nanf("") : l;  // poisoned in the second epoch
  };
  try {
    trainer.fit(*run.model, loss, *run.opt, *run.train_loader);
    FAIL() << "expected NumericalError";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("step 9"), std::string::npos) << e.what();
  }
  // The epoch-1 checkpoint is the newest, and it holds finite parameters.
  io::CheckpointDirectory cd(dir.file("ckpt"));
  ASSERT_EQ(cd.list().size(), 1u);
  for (auto& [name, t2] : io::read_checkpoint(cd.list().back()).model) {
    for (float v : t2.to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

TEST(Trainer, NanGradientNamesTheParameter) {
  TrainingRun run;
  train::Trainer trainer(quiet(), dist::Communicator::world());
  // A loss whose gradient is NaN for the last layer's bias only: 0 * log(0)-style.
  auto loss = [&](const Tensor& out, const Tensor&) {
    Tensor b = (*run.model)[3]->named_parameters()[1].second;
    return mean(out) * 0.0f + sum(sqrt(b - b));  // d sqrt(x)/dx at 0 is Inf
  };
  try {
    trainer.fit(*run.model, loss, *run.opt, *run.train_loader);
    FAIL() << "expected NumericalError";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("'3.bias'"), std::string::npos) << e.what();
  }
}

TEST(Trainer, WritesMetricsAsCsvOrJsonLines) {
  TempDir dir;
  for (const std::string name : {"m.csv", "m.jsonl"}) {
    TrainingRun run;
    train::TrainerOptions t = quiet();
    t.epochs = 2;
    t.log_every_steps = 2;
    t.metrics_path = dir.file(name);
    run.fit(t);
    std::ifstream in(t.metrics_path);
    std::string first;
    std::getline(in, first);
    int rows = 0;
    std::string line;
    while (std::getline(in, line)) ++rows;
    if (name == "m.csv") {
      EXPECT_EQ(first.rfind("type,epoch,step,loss,accuracy,lr", 0), 0u) << first;
      EXPECT_EQ(rows, 6 + 2);  // 6 step rows (12 steps / 2) and 2 epoch rows
    } else {
      EXPECT_NE(first.find("\"type\":\"step\""), std::string::npos) << first;
      EXPECT_EQ(rows + 1, 6 + 2);
    }
  }
}

TEST(Trainer, RejectsBadOptions) {
  train::TrainerOptions t = quiet();
  t.monitor = "val_f1";
  EXPECT_THROW(train::Trainer(t, dist::Communicator::world()), ValueError);
  t = quiet();
  t.resume = "auto";
  EXPECT_THROW(train::Trainer(t, dist::Communicator::world()), ValueError);
}

TEST(Trainer, RefusesADirectoryItWouldTakeOverAndWritesNothing) {
  TempDir dir;
  train::TrainerOptions t = quiet();
  t.epochs = 1;
  t.checkpoint_dir = dir.file("ckpt");
  t.run_config = {{"lr", "0.1"}};
  TrainingRun{}.fit(t);
  auto listing = [&] {
    std::vector<std::pair<std::string, uintmax_t>> out;
    for (auto& e : std::filesystem::recursive_directory_iterator(t.checkpoint_dir)) {
      out.emplace_back(e.path().string(), e.is_regular_file() ? e.file_size() : 0);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto before = listing();
  using Reason = io::RunDirectoryError::Reason;
  train::TrainerOptions other = t;
  other.run_config["lr"] = "0.2";
  other.resume = "auto";
  EXPECT_EQ(refusal(other), Reason::OtherConfiguration);
  EXPECT_EQ(refusal(t), Reason::HoldsThisRun);  // a fresh start over its own checkpoints
  train::TrainerOptions older = t;
  older.resume = io::CheckpointDirectory(t.checkpoint_dir).list().front();
  TrainingRun{}.fit([&] {
    train::TrainerOptions more = t;
    more.resume = "auto";
    more.epochs = 2;
    return more;
  }());
  const auto after_second_epoch = listing();
  EXPECT_EQ(refusal(older), Reason::WouldFork);
  EXPECT_EQ(listing(), after_second_epoch);
  EXPECT_NE(before, after_second_epoch);
}

TEST(Trainer, ResumingRefusesCountsThatAreNotWholeNumbers) {
  TempDir dir;
  train::TrainerOptions t = quiet();
  t.epochs = 1;
  t.checkpoint_dir = dir.file("ckpt");
  TrainingRun{}.fit(t);
  const std::string newest = io::CheckpointDirectory(t.checkpoint_dir).list().back();
  auto set_training = [&](const std::string& key, double v) {
    io::h5::File f = io::h5::File::open(newest, io::h5::File::Mode::ReadWrite);
    f.open_group("training").set_attribute(key, v);
  };
  t.epochs = 2;
  t.resume = "auto";
  auto refusal = [&] {
    try {
      TrainingRun{}.fit(t);
    } catch (const IOError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "the run resumed";
    return std::string();
  };
  set_training("bad_epochs", 0.5);
  std::string why = refusal();
  EXPECT_NE(why.find("bad_epochs = 0.5"), std::string::npos) << why;
  EXPECT_NE(why.find(newest), std::string::npos) << why;
  set_training("bad_epochs", 0);
  set_training("scheduler.last_epoch", std::nan(""));
  why = refusal();
  EXPECT_NE(why.find("last_epoch = nan"), std::string::npos) << why;
  EXPECT_NE(why.find(newest), std::string::npos) << why;
  set_training("scheduler.last_epoch", 1);
  set_training("scheduler.base_lr", -INFINITY);
  why = refusal();
  EXPECT_NE(why.find("base_lr = -inf"), std::string::npos) << why;
  // Mended, the same file resumes.
  set_training("scheduler.base_lr", 0.1);
  EXPECT_EQ(TrainingRun{}.fit(t).resumed_from, newest);
}

TEST(Trainer, AStepReadsBackOnlyWhatItMustShow) {
  // 96 samples, batches of 16: 6 steps. Besides the batches going up, the host
  // reads: one copy per step with anomaly checks (loss and gradient health
  // together), one per shown progress line, and the epoch's sums at its end.
  auto copies = [](bool anomaly, int64_t log_every) {
    TrainingRun run;
    train::TrainerOptions t = quiet();
    t.epochs = 1;
    t.detect_anomaly = anomaly;
    t.log_every_steps = log_every;
    const TransferCounts before = Runtime::get().transfers();
    run.fit(t);
    const TransferCounts after = Runtime::get().transfers();
    // Features and labels of every batch: 6 of training, 3 of validation.
    EXPECT_EQ(after.to_device - before.to_device, (6 + 3) * 2);
    // The validation pass reads its sums once, too.
    return after.to_host - before.to_host - 2;
  };
  EXPECT_EQ(copies(false, 1000000), 0);
  EXPECT_EQ(copies(true, 1000000), 6);
  EXPECT_EQ(copies(false, 2), 3);  // lines at steps 2, 4 and 6
  EXPECT_EQ(copies(true, 2), 6);   // the same copies carry the lines
}

namespace {

std::string contents_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The step of every row of a CSV metrics file, in order.
std::vector<int64_t> csv_steps(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  std::vector<int64_t> steps;
  while (std::getline(in, line)) {
    const size_t a = line.find(',');
    const size_t b = line.find(',', a + 1);
    const size_t c = line.find(',', b + 1);
    steps.push_back(std::stoll(line.substr(b + 1, c - b - 1)));
  }
  return steps;
}

}  // namespace

TEST(TrainerMetrics, AResumeKeepsTheRowsUpToItsStepAndWritesEachStepOnce) {
  TempDir dir;
  train::TrainerOptions t = quiet();
  t.epochs = 2;  // 6 steps an epoch
  t.log_every_steps = 1;
  t.checkpoint_dir = dir.file("ckpt");
  t.checkpoint_every_steps = 4;
  t.metrics_path = dir.file("m.csv");
  TrainingRun{}.fit(t);
  const std::vector<int64_t> straight = csv_steps(t.metrics_path);
  ASSERT_EQ(straight.size(), 12u + 2u);
  // The run "died" after step 8's checkpoint: its later checkpoints are gone,
  // its rows of steps 9..12 (and a row cut short by the crash) are not.
  for (const std::string& path : io::CheckpointDirectory(t.checkpoint_dir).list()) {
    if (path != io::CheckpointDirectory(t.checkpoint_dir).path_for(8))
      std::filesystem::remove(path);
  }
  std::filesystem::remove(io::CheckpointDirectory(t.checkpoint_dir).best_path());
  std::ofstream(t.metrics_path, std::ios::app) << "step,2,13,0.5";
  train::TrainerOptions resume = t;
  resume.resume = "auto";
  TrainingRun{}.fit(resume);
  EXPECT_EQ(csv_steps(t.metrics_path), straight);
}

TEST(TrainerMetrics, AFreshStartNeverReplacesRows) {
  TempDir dir;
  train::TrainerOptions t = quiet();
  t.epochs = 1;
  t.metrics_path = dir.file("m.csv");
  TrainingRun{}.fit(t);
  const std::string rows = contents_of(t.metrics_path);
  using Reason = io::RunDirectoryError::Reason;
  EXPECT_EQ(refusal(t), Reason::MetricsFileExists);
  // --resume auto where there is nothing to resume starts fresh: the same.
  train::TrainerOptions nothing = t;
  nothing.checkpoint_dir = dir.file("new-ckpt");
  nothing.resume = "auto";
  EXPECT_EQ(refusal(nothing), Reason::MetricsFileExists);
  EXPECT_EQ(contents_of(t.metrics_path), rows);
  train::TrainerOptions overwrite = t;
  overwrite.overwrite = true;
  TrainingRun{}.fit(overwrite);
  EXPECT_EQ(csv_steps(t.metrics_path).size(), 1u);  // one epoch row, as before
}

TEST(TrainerMetrics, AFileThatIsNotKdpsMetricsIsNeverWritten) {
  TempDir dir;
  using Reason = io::RunDirectoryError::Reason;
  auto a = make_model();
  optim::SGD opt(a->named_parameters(), optim::SGDOptions{});
  io::save_checkpoint(dir.file("ckpt.h5"), *a, opt, io::TrainingState{});
  std::ofstream(dir.file("notes.csv")) << "date,weight\n2026-01-01,70\n";
  std::ofstream(dir.file("log.jsonl")) << "{\"level\": \"info\"}\n";
  for (const std::string name : {"ckpt.h5", "notes.csv", "log.jsonl"}) {
    const std::string before = contents_of(dir.file(name));
    for (bool overwrite : {false, true}) {
      train::TrainerOptions t = quiet();
      t.metrics_path = dir.file(name);
      t.overwrite = overwrite;
      EXPECT_EQ(refusal(t), Reason::NotKdpFile) << name;
      train::TrainerOptions resume = t;
      resume.overwrite = false;
      resume.checkpoint_dir = dir.file("ckpt-dir");
      resume.resume = "auto";
      EXPECT_EQ(refusal(resume), Reason::NotKdpFile) << name;
    }
    EXPECT_EQ(contents_of(dir.file(name)), before) << name;
  }
  // A directory or a device is refused by its type, and a refused run leaves
  // no file it created behind.
  train::TrainerOptions t = quiet();
  t.metrics_path = dir.path().string();
  EXPECT_THROW(TrainingRun{}.fit(t), IOError);
  t.metrics_path = "/dev/null";
  EXPECT_THROW(TrainingRun{}.fit(t), IOError);
  t.metrics_path = dir.file("fresh.csv");
  t.checkpoint_dir = dir.file("ckpt-dir");
  t.resume = "auto";
  std::filesystem::create_directories(t.checkpoint_dir);
  std::ofstream(dir.file("ckpt-dir/ckpt-000000001.h5")) << "not a checkpoint";
  EXPECT_EQ(refusal(t), Reason::NothingToResume);
  EXPECT_FALSE(std::filesystem::exists(t.metrics_path));
}

TEST(TrainerMetrics, AWriteThatFailsStopsTheRun) {
  // The process may write files of 300 bytes at most: the metrics header and
  // a few rows fit, the next row does not. EFBIG stands in for a full disk:
  // both are a write() that fails. The checkpoint the run then tries hits the
  // same limit (a full disk would stop it too): the message says so.
  // (tests/reliability/user_data.sh fills a real file system under the
  // metrics file alone, where the checkpoint is written.)
  TempDir dir;
  for (bool with_checkpoints : {false, true}) {
    train::TrainerOptions t = quiet();
    t.epochs = 3;
    t.log_every_steps = 1;
    t.metrics_path = dir.file(with_checkpoints ? "a.csv" : "b.csv");
    if (with_checkpoints) t.checkpoint_dir = dir.file("ckpt");
    struct rlimit old {};
    ::getrlimit(RLIMIT_FSIZE, &old);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old;
    small.rlim_cur = 300;
    ::setrlimit(RLIMIT_FSIZE, &small);
    std::string message;
    try {
      TrainingRun{}.fit(t);
    } catch (const IOError& e) {
      message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_NE(
        message.find("cannot write the metrics file '" + t.metrics_path + "': file too large"),
        std::string::npos)
        << message;
    EXPECT_NE(message.find("; training stopped at step "), std::string::npos) << message;
    EXPECT_NE(message.find(with_checkpoints
                               ? "no checkpoint either: kdp::io::AtomicFile::write: cannot write"
                               : "no checkpoint_dir, so no checkpoint"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    if (with_checkpoints) {
      for (const auto& e : std::filesystem::directory_iterator(t.checkpoint_dir)) {
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
      }
    }
  }
}

TEST(TrainerLocks, ARunWhoseDirectoryIsHeldIsRefusedAndChangesNothing) {
  TempDir dir;
  train::TrainerOptions t = quiet();
  t.epochs = 1;
  t.checkpoint_dir = dir.file("ckpt");
  t.metrics_path = dir.file("m.csv");
  io::CheckpointDirectory held_dir(t.checkpoint_dir);
  io::FileLock held = held_dir.lock();
  EXPECT_EQ(refusal(t), io::RunDirectoryError::Reason::InUse);
  EXPECT_FALSE(std::filesystem::exists(t.metrics_path));
  EXPECT_TRUE(io::CheckpointDirectory(t.checkpoint_dir).list().empty());
  held.release();
  // The metrics file alone, held by another run.
  io::FileLock metrics = io::FileLock::try_acquire(t.metrics_path);
  ASSERT_TRUE(metrics.held());
  EXPECT_EQ(refusal(t), io::RunDirectoryError::Reason::InUse);
  metrics.release();
  TrainingRun{}.fit(t);
  EXPECT_FALSE(std::filesystem::exists(held_dir.lock_path()));  // released with the run
}

TEST(Trainer, StopsAfterTheEpochThatReachesTheThreshold) {
  // The validation accuracy of an uninterrupted run, epoch by epoch; then the
  // same run told to stop at the second epoch's value stops there.
  train::TrainerOptions t = quiet();
  t.epochs = 6;
  t.monitor = "val_accuracy";
  const train::FitResult full = TrainingRun{}.fit(t);
  ASSERT_EQ(full.history.size(), 6u);
  double goal = full.history[1].val_accuracy;
  size_t first = 0;
  while (full.history[first].val_accuracy < goal) ++first;
  t.stopping_threshold = goal;
  const train::FitResult stopped = TrainingRun{}.fit(t);
  EXPECT_TRUE(stopped.early_stopped);
  EXPECT_EQ(stopped.epochs_completed, static_cast<int64_t>(first + 1));
  // A loss is reached from above.
  t.monitor = "val_loss";
  t.stopping_threshold = full.history[2].val_loss;
  const train::FitResult by_loss = TrainingRun{}.fit(t);
  EXPECT_LE(by_loss.history.back().val_loss, t.stopping_threshold);
  EXPECT_LE(by_loss.epochs_completed, 3);
}

// A regression's evaluation: MSE, MAE and R² against a direct computation
// over the whole set (R² with each target component about its own mean), with
// targets far from zero so that a sum-of-squares formula would cancel.
TEST(Trainer, EvaluatesARegressionsErrorsAndR2) {
  auto set = data::synthetic_regression(50, 4, 3, 9);
  std::vector<int64_t> all(50);
  for (int64_t i = 0; i < 50; ++i) all[static_cast<size_t>(i)] = i;
  std::vector<float> x(50 * 4), y(50 * 3);
  set->fetch(all, x.data(), y.data());
  for (size_t i = 0; i < y.size(); ++i) y[i] = 1000.0f + y[i] * static_cast<float>(1 + i % 3);
  auto shifted = std::make_shared<data::TensorDataset>(x, Shape{4}, y, Shape{3});
  data::DataLoaderOptions o;
  o.batch_size = 16;  // an uneven last batch
  data::DataLoader loader(shifted, std::make_shared<data::SequentialSampler>(50), o);
  manual_seed(3);
  nn::Linear model(4, 3);
  {
    NoGradGuard no_grad;
    model.named_parameters().back().second.fill_(1000.0f);  // the bias: near the targets
  }
  train::Trainer trainer(quiet(), dist::Communicator::world());
  nn::MSELoss mse;
  const train::EvalResult e = trainer.evaluate(model, std::ref(mse), loader);
  EXPECT_TRUE(std::isnan(e.accuracy));
  NoGradGuard no_grad;
  const std::vector<float> out = model.forward(Tensor::from_host(x, {50, 4})).to_vector();
  double se = 0, ae = 0, spread = 0;
  for (int c = 0; c < 3; ++c) {
    double mean = 0;
    for (int s = 0; s < 50; ++s) mean += y[static_cast<size_t>(s * 3 + c)] / 50.0;
    for (int s = 0; s < 50; ++s) {
      const double d = y[static_cast<size_t>(s * 3 + c)] - mean;
      spread += d * d;
    }
  }
  for (size_t i = 0; i < y.size(); ++i) {
    se += (out[i] - y[i]) * static_cast<double>(out[i] - y[i]);
    ae += std::fabs(out[i] - y[i]);
  }
  EXPECT_NEAR(e.mse, se / 150.0, 1e-4 * se / 150.0);
  EXPECT_NEAR(e.loss, se / 150.0, 1e-4 * se / 150.0);  // MSELoss is the MSE
  EXPECT_NEAR(e.mae, ae / 150.0, 1e-4 * ae / 150.0);
  EXPECT_NEAR(e.r2, 1.0 - se / spread, 1e-4);
  EXPECT_LT(e.r2, 1.0);
}

// Rows appended to a CSV file of an earlier version follow its header, which
// had fewer columns.
TEST(TrainerMetrics, RowsAppendedToAnOlderFileFollowItsHeader) {
  TempDir dir;
  const std::string path = dir.file("old.csv");
  std::ofstream(path) << "type,epoch,step,loss\nepoch,1,6,0.5\n";
  {
    train::MetricsWriter w(path, /*append=*/true);
    w.write("epoch", {{"epoch", 2}, {"step", 12}, {"loss", 0.25}, {"val_r2", 0.5}});
    w.close();
  }
  std::ifstream in(path);
  std::string header, first, second;
  std::getline(in, header);
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(header, "type,epoch,step,loss");
  EXPECT_EQ(second, "epoch,2,12,0.25");
}
