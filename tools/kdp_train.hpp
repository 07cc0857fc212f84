#pragma once
// kdp-train's pieces: its options (kdp_train_options.cpp), the data, model,
// optimizer and Trainer options they make (kdp_train_setup.cpp), and the run
// itself (kdp_train.cpp).
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kdp/kdp.hpp"

namespace kdp::train_tool {

// Every option of kdp-train, with its default.
struct Options {
  std::string data = "data/fashion-mnist.h5";
  std::string inputs = "images";  // a name in /train and /test, or one dataset's path
  std::string targets = "labels";
  std::string val_data;              // the validation samples from this file instead
  double val_fraction = 0.0;         // hold out this fraction of the training samples
  std::string loss;                  // "": cross_entropy for classes, mse otherwise
  std::string monitor;               // "": val_accuracy for classes, val_loss otherwise
  std::string normalise = "global";  // the features': global, channel or none
  bool standardise_targets = false;
  int64_t patience = 0;  // epochs without improvement of --monitor before stopping (0: never)
  std::string model = "784,256,256,10";
  std::string activation = "relu";
  int64_t epochs = 10;
  int64_t batch_size = 128;
  std::string optimizer = "adam";
  double lr = 1e-3;
  double momentum = 0.9;
  double weight_decay = 0.0;
  int devices = 1;
  uint64_t seed = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep_last = 3;
  std::string resume = "never";
  bool overwrite = false;
  std::string metrics;
  int64_t max_steps = -1;
  int threads = 0;
  std::string scheduler = "none";
  double grad_clip = 0.0;
  int64_t accumulate = 1;
  bool no_anomaly_check = false;
  std::string progress = "auto";
  int64_t log_every = 50;
  bool without_locks = false;
  std::string status_file;
  double gamma = 0.1;
  int64_t step_size = 0;  // 0: epochs / 3
  std::vector<int64_t> milestones;
  bool sync_batchnorm = false;
  double stop_at_accuracy = 0.0;  // 0: train every epoch
  std::string trace;
  std::string comm_hook = "allreduce";
  bool comm_hook_given = false;  // --comm-hook was on the command line
  bool shard_optimizer = false;
  std::string checkpoint_writes = "slices";
  bool reproducible_on = false, reproducible_off = false;  // --reproducible, --no-reproducible
  bool reproducible = false;                               // the run's mode: choose_modes() sets it
  int shards = 12;
  std::string precision = "fp32";
  double bucket_mb = dist::DDPOptions{}.bucket_cap_mb;
  int64_t sample = 0;         // text: tokens generated after training (0: none)
  double temperature = 1.0;   // of the sampling (0: the most likely token)
  uint64_t sample_seed = 0;   // of the sampling's draws
  std::string prompt = "\n";  // the text the sample follows
};

// The training and validation samples, normalised by the training features'
// mean and standard deviation; flat samples or images, as the model's first
// layer takes them. Targets are class indices or, for a regression, floats.
struct TrainingData : data::Splits {
  float mean = 0.0f, stddev = 1.0f;              // --normalise global
  data::ChannelNormalisation features, targets;  // channel, --standardise-targets
};

// The loss of --loss, checked against the targets.
nn::LossFunction make_loss(const Options& o, const TrainingData& d);

// The model of --model: a layer list ("conv(32,3),relu,...") or MLP sizes
// ("784,256,10"), checked against the data's samples and classes, and how the
// run configuration records it.
struct Model {
  std::shared_ptr<nn::Module> net;
  std::string recorded;
  bool images = false;  // whether it takes images (else flat samples)
};

// How samples meet the model's first layer.
enum class SampleForm { Flat, Images, AsStored };
SampleForm sample_form(const std::string& model);
TrainingData load_data(const Options& o, dist::Communicator& comm, SampleForm form);
Model build_model(const Options& o, const TrainingData& d, const Device& device);
std::unique_ptr<optim::Optimizer> make_optimizer(const Options& o,
                                                 const optim::NamedParameters& params);
std::unique_ptr<optim::LRScheduler> make_scheduler(const Options& o, optim::Optimizer& opt);
train::TrainerOptions trainer_options(const Options& o, const Model& m, const TrainingData& d,
                                      const std::vector<Device>& devs);
/// Refuses a batch that the ranks and devices cannot share.
void check_batch(const Options& o, int ranks);

// The run's modes by train::decide_modes (the model as it will train, its
// BatchNorm layers already synchronised where --sync-batchnorm asks):
// reproducible mode (o.reproducible) where --reproducible asks for it (or
// --shards), off with --no-reproducible, and otherwise on where it costs
// about the default mode's step and changes nothing else. The line that says
// so and why, with the option that changes it.
std::string choose_modes(Options& o, dist::Communicator& comm, const Model& m,
                         const TrainingData& d, const Device& device);

/// The options, by concern.
void add_data_options(CLI::App& app, Options& o);
void add_training_options(CLI::App& app, Options& o);
void add_file_options(CLI::App& app, Options& o);
void add_distributed_options(CLI::App& app, Options& o);
void add_run_options(CLI::App& app, Options& o);

}  // namespace kdp::train_tool
