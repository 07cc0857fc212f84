// kdp-train's command-line options, by concern.
#include <limits>

#include "cli_checks.hpp"
#include "kdp_train.hpp"

namespace kdp::train_tool {

// What is learnt from: the samples, their normalisation, the loss and the
// metric that picks the best checkpoint.
void add_data_options(CLI::App& app, Options& o) {
  app.add_option("--data", o.data,
                 "HDF5 file with /train and /test groups, or one set of samples (see --inputs); "
                 "a glob ('runs/run-*.h5') or comma list of files is one dataset (default: "
                 "Fashion-MNIST, imported on first use)");
  app.add_option("--inputs", o.inputs,
                 "The features' dataset: a name in the /train and /test groups, or a path "
                 "('/fields') in a file of one set of samples");
  app.add_option("--targets", o.targets,
                 "The targets' dataset, named as --inputs: integer classes, or floats of any "
                 "shape (a regression)");
  app.add_option("--val-data", o.val_data,
                 "Validate on this file's samples (at --inputs/--targets; names in its /test)");
  app.add_option("--val-fraction", o.val_fraction,
                 "Validate on this fraction of the training samples, held out by --seed "
                 "(default 0.1 for a file of one set of samples)")
      ->check(cli::real_number(0.0, false));
  app.add_option("--loss", o.loss,
                 "cross_entropy (classes), or mse, l1, smooth_l1, huber (a regression; "
                 "PyTorch's definitions); default: what the targets are")
      ->check(CLI::IsMember({"cross_entropy", "mse", "l1", "smooth_l1", "huber"}));
  app.add_option("--patience", o.patience,
                 "Stop after this many epochs without improvement of --monitor (0: never)")
      ->check(cli::whole_number(0));
  app.add_option(
         "--normalise", o.normalise,
         "Standardise the features with one mean and deviation (global, from up to "
         "10000 samples), per channel (channel: the first dimension of images, "
         "signals and volumes, each feature of tables; one pass over every sample, applied on the "
         "device), or not at all (none); recorded in the run and its checkpoints")
      ->check(CLI::IsMember({"global", "channel", "none"}));
  app.add_flag("--standardise-targets", o.standardise_targets,
               "Train a regression on targets standardised per channel; errors and R² are "
               "reported in the targets' own units");
  app.add_option("--monitor", o.monitor,
                 "The metric for the best checkpoint (default: val_accuracy for classes, "
                 "val_loss for a regression)")
      ->check(CLI::IsMember(
          {"val_loss", "val_accuracy", "val_mse", "val_mae", "val_r2", "loss", "accuracy"}));
}

// What is trained and how: model, optimizer and schedule, devices, seed.
void add_training_options(CLI::App& app, Options& o) {
  app.add_option("--model", o.model,
                 "MLP layer sizes, input first, classes last (784,256,10), or a layer list: "
                 "conv(out,k[,stride[,padding]]), batchnorm, relu (and the other activations), "
                 "maxpool(k), avgpool(k), gap, dropout(p), dropout2d(p), flatten, linear(out), "
                 "conv1d(out,k[,stride[,padding]]), maxpool1d(k), avgpool1d(k) (signals), "
                 "conv3d(out,k[,stride[,padding]]), maxpool3d(k), avgpool3d(k) (volumes), "
                 "e.g. 'conv(32,3),relu,maxpool(2),flatten,linear(10)'");
  app.add_option("--activation", o.activation, "Activation between layers")
      ->check(CLI::IsMember({"relu", "leaky_relu", "tanh", "sigmoid", "gelu"}));
  app.add_option("--epochs", o.epochs, "Epochs to train")->check(cli::whole_number(1));
  app.add_option("--batch-size", o.batch_size, "Global batch size (split evenly among ranks)")
      ->check(cli::whole_number(1));
  app.add_option("--optimizer", o.optimizer, "Optimizer")
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "adadelta"}));
  app.add_option("--lr", o.lr, "Learning rate")->check(cli::real_number(0.0, false));
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(cli::real_number(0.0, true));
  app.add_option("--weight-decay", o.weight_decay, "Weight decay (decoupled for adamw)")
      ->check(cli::real_number(0.0, true));
  app.add_option("--scheduler", o.scheduler, "Learning-rate schedule over the epochs")
      ->check(CLI::IsMember({"none", "cosine", "step", "multistep"}));
  app.add_option("--gamma", o.gamma, "The lr factor of --scheduler step and multistep")
      ->check(cli::real_number(0.0, false));
  app.add_option("--step-size", o.step_size,
                 "Epochs between the lr steps of --scheduler step (default: epochs / 3)")
      ->check(cli::whole_number(1));
  app.add_option("--milestones", o.milestones,
                 "The epochs where --scheduler multistep multiplies the lr by --gamma, e.g. 5,8")
      ->delimiter(',')
      ->check(cli::whole_number(1));
  app.add_option("--stop-at-accuracy", o.stop_at_accuracy,
                 "Stop after the epoch whose test accuracy reaches this (0: train every epoch)")
      ->check(cli::real_number(0.0, true));
  app.add_flag("--sync-batchnorm", o.sync_batchnorm,
               "Normalise with the statistics of the whole batch across devices and ranks "
               "(SyncBatchNorm)");
  app.add_option("--devices", o.devices,
                 "Device instances per rank (DataParallel inside each rank)")
      ->check(cli::whole_number(1, 1 << 16));
  app.add_option("--precision", o.precision,
                 "Products and convolutions in fp32, in bf16 with fp32 accumulation (weights, "
                 "optimizer and checkpoints stay fp32), or auto (bf16 where the CPU has AMX or "
                 "the GPU tensor cores)")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
  app.add_option("--seed", o.seed, "Seed of initialisation, shuffling and dropout")
      ->check(cli::unsigned_number());
}

// Where the run's files go and how it starts: checkpoints, resume, metrics.
void add_file_options(CLI::App& app, Options& o) {
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Directory for checkpoints (none when empty); it belongs to one run "
                 "configuration");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "Also checkpoint every N optimizer steps (0: epochs only)")
      ->check(cli::whole_number(0));
  app.add_option("--keep-last", o.keep_last, "Checkpoints of this run to keep")
      ->check(cli::whole_number(1, 1 << 30));
  app.add_option("--resume", o.resume,
                 "'never' (the default: a fresh start), 'auto' (the newest checkpoint in "
                 "--checkpoint-dir that loads; unusable newer ones go to its rejected/) or a "
                 "checkpoint file");
  app.add_flag("--overwrite", o.overwrite,
               "With --resume never: discard the checkpoints in --checkpoint-dir and replace "
               "the --metrics, --trace and --status-file files, where they are kdp's");
  app.add_option("--metrics", o.metrics, "Metrics file (.csv, or JSON lines otherwise)");
  app.add_option("--sample", o.sample,
                 "Text (a gpt on token windows): print this many tokens generated by the trained "
                 "model (after --resume of a finished run: by its checkpoint)")
      ->check(cli::whole_number(0, 1 << 20));
  app.add_option("--temperature", o.temperature,
                 "The sample's temperature: its logits are divided by it (0: the most likely "
                 "token each time)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--prompt", o.prompt, "The text the sample follows (default: a new line)");
  app.add_option("--sample-seed", o.sample_seed,
                 "Seed of the sample's draws: the same model, prompt, temperature and seed give "
                 "the same text");
}

// Across ranks: the gradient exchange and the timeline.
void add_distributed_options(CLI::App& app, Options& o) {
  app.add_option("--trace", o.trace,
                 "Chrome-trace JSON of every rank's step phases, written by rank 0 at the end "
                 "(chrome://tracing or Perfetto); names the slowest rank");
  app.add_option("--comm-hook", o.comm_hook,
                 "How gradient buckets are reduced across ranks: allreduce (float32), bf16 "
                 "(half the bytes, error feedback), hierarchical (inside each node first), "
                 "hierarchical-bf16")
      ->check(CLI::IsMember({"allreduce", "bf16", "hierarchical", "hierarchical-bf16"}))
      ->each([&o](const std::string&) { o.comm_hook_given = true; });
  CLI::Option* on = app.add_flag(
      "--reproducible", o.reproducible_on,
      "The same weights, bit for bit, at any number of ranks dividing --shards (virtual "
      "shards summed exactly, dropout per sample, BatchNorm per shard, SyncBatchNorm over the "
      "whole batch; costs an MLP 0.9-1.4x DDP's step, depending on the CPU, other models "
      "more). Off unless asked: the first lines say which mode runs and why");
  app.add_flag("--no-reproducible", o.reproducible_off,
               "DDP's exchange, the default: DistributedDataParallel's overlapped float allreduce, "
               "DataParallel over --devices, BatchNorm over each rank's batch")
      ->excludes(on);
  app.add_option("--shards", o.shards,
                 "The virtual shards of each batch in reproducible mode (asks for it); the rank "
                 "counts that divide it give the same bits (12: 1, 2, 3, 4, 6, 12; fewer "
                 "shards cost less)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--shard-optimizer", o.shard_optimizer,
               "Each rank keeps and updates the optimizer state of 1/N of the parameters and "
               "broadcasts them (ZeRO-1); checkpoints are the same");
  app.add_option("--checkpoint-writes", o.checkpoint_writes,
                 "With --shard-optimizer: slices (each rank writes its own part of the "
                 "optimizer state into the checkpoint; the directory must be one file system "
                 "for every rank) or gather (rank 0 gathers the state and writes it)")
      ->check(CLI::IsMember({"slices", "gather"}));
  app.add_option("--bucket-mb", o.bucket_mb,
                 "Gradient bucket size in MB for the reductions (0: 25 on one node, 4 across "
                 "nodes)")
      ->check(cli::real_number(0.0, true));
}

// Limits, threads, checks and what the run shows.
void add_run_options(CLI::App& app, Options& o) {
  app.add_option("--max-steps", o.max_steps, "Stop after this many optimizer steps (-1: no limit)")
      ->check(cli::whole_number(-1, std::numeric_limits<int64_t>::max(),
                                "-1 (no limit) or a number of steps"));
  app.add_option("--threads", o.threads,
                 "BLAS/host threads per rank (0: cores / ranks on the node)")
      ->check(cli::whole_number(0, 1 << 16));
  app.add_option("--grad-clip", o.grad_clip, "Clip the gradient norm to this (0: off)")
      ->check(cli::real_number(0.0, true));
  app.add_option("--accumulate", o.accumulate, "Micro-batches per optimizer step")
      ->check(cli::whole_number(1));
  app.add_flag("--no-anomaly-check", o.no_anomaly_check,
               "Do not check loss and gradients for NaN/Inf");
  app.add_option("--progress", o.progress, "Progress display")
      ->check(CLI::IsMember({"auto", "bar", "lines"}));
  app.add_option("--log-every", o.log_every, "Log a line (and a metrics row) every N steps")
      ->check(cli::whole_number(1));
  app.add_flag("--without-locks", o.without_locks,
               "Run where the file system has no working locks (Lustre without flock, NFS "
               "without a lock manager); you make sure that one run at a time uses "
               "--checkpoint-dir and --metrics");
  app.add_option("--status-file", o.status_file,
                 "Rank 0 writes its exit status here as it ends (for batch scripts whose "
                 "launcher reports one of its own)");
}

}  // namespace kdp::train_tool
