// kdp-train: trains an MLP or a CNN on an HDF5 dataset (Fashion-MNIST by
// default) across MPI ranks and device instances, with checkpoints, resume and
// metrics.
//
//   mpirun -np 2 kdp-train --epochs 10
//   srun kdp-train --checkpoint-dir runs/ckpt --resume auto
//
// Exit status: 0 done; 1 error (the message says what); 75 stopped by SIGTERM,
// SIGINT or SIGUSR1 after writing a checkpoint (requeue and --resume auto);
// 128 + the signal when a signal stopped it before any checkpoint was written.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <tuple>

#include "cli_checks.hpp"
#include "kdp/io/run_directory_error.hpp"
#include "kdp/kdp.hpp"
#include "kdp_train.hpp"

using namespace kdp;
using namespace kdp::train_tool;

namespace {

// A signal during the start-up (loading data, building the model) ends the run
// on every rank before it writes anything: the signal, or 0 for none.
int signal_before_training(dist::Communicator& comm) {
  int64_t early = StopSignal::requested() ? StopSignal::signal() : 0;
  comm.allreduce(&early, 1, dist::ReduceOp::Max);
  if (early != 0 && comm.rank() == 0) {
    std::printf("kdp-train: stopped by signal %lld before training started; nothing was written\n",
                static_cast<long long>(early));
  }
  return static_cast<int>(early);
}

// The exit status of a fit that a signal stopped: 75 asks the batch script to
// requeue, which helps only when there is a checkpoint to resume from.
int stopped_by_signal(const train::FitResult& r, bool rank0) {
  if (r.last_checkpoint.empty()) {
    if (rank0) {
      std::printf(
          "kdp-train: stopped by signal %d at step %lld; no checkpoint was written (there is "
          "no --checkpoint-dir), so nothing can be resumed; exit %d\n",
          r.signal, static_cast<long long>(r.global_step), 128 + r.signal);
    }
    return 128 + r.signal;
  }
  if (rank0) {
    std::printf(
        "kdp-train: stopped by signal %d at step %lld; checkpoint %s; exit %d (requeue "
        "and run again with --resume auto)\n",
        r.signal, static_cast<long long>(r.global_step), r.last_checkpoint.c_str(),
        train::kExitRequeue);
  }
  return train::kExitRequeue;
}

// The model as the run trains it: DataParallel over the rank's devices, DDP
// over the ranks.
std::shared_ptr<nn::Module> parallel_model(const Options& o, std::shared_ptr<nn::Module> net,
                                           const std::vector<Device>& devs,
                                           dist::Communicator& comm) {
  // Reproducible mode reduces the gradients itself, on each rank's first device.
  if (o.reproducible) return net;
  if (o.devices > 1) net = std::make_shared<DataParallel>(net, devs);
  if (comm.size() == 1) return net;
  return std::make_shared<dist::DistributedDataParallel>(
      net, comm,
      dist::DDPOptions{}
          .with_comm_hook(dist::comm_hook_named(o.comm_hook))
          .with_bucket_cap_mb(o.bucket_mb));
}

// Every rank's reduction bytes, summed: what the network and shared memory
// carried (rank 0 prints them).
void report_traffic(const Options& o, dist::Communicator& comm) {
  const dist::Traffic mine = comm.traffic();
  double bytes[2] = {static_cast<double>(mine.between_nodes),
                     static_cast<double>(mine.within_node)};
  comm.allreduce(bytes, 2, dist::ReduceOp::Sum);
  if (comm.rank() != 0 || comm.size() == 1) return;
  std::printf(
      "communication: %.3f MB over the network, %.3f MB in shared memory (%d node(s), %s)\n",
      bytes[0] * 1e-6, bytes[1] * 1e-6, comm.nodes(),
      o.reproducible ? "exact sums" : ("hook " + o.comm_hook).c_str());
}

// The precision a run computes in, and why where --precision auto chose it.
std::string precision_line(const train::Trainer& trainer) {
  const std::string ran = precision_name(trainer.precision());
  if (trainer.options().precision != Precision::Auto) return ran;
  return ran + (trainer.precision() == Precision::bf16
                    ? " (auto: the device has bf16 matrix units)"
                    : " (auto: the device has no bf16 matrix units)");
}

// The validation figures at the end: the last epoch's evaluation unless
// steps were taken after it (a step limit inside an epoch).
train::EvalResult final_evaluation(const train::FitResult& r, train::Trainer& trainer,
                                   nn::Module& model, const nn::LossFunction& loss,
                                   data::DataLoader& val_loader) {
  if (r.history.empty() || r.history.back().step != r.global_step ||
      std::isnan(r.history.back().val_loss)) {
    return trainer.evaluate(model, loss, val_loader);
  }
  const train::EpochRecord& last = r.history.back();
  train::EvalResult e;
  e.loss = last.val_loss;
  e.accuracy = last.val_accuracy;
  e.mse = last.val_mse;
  e.mae = last.val_mae;
  e.r2 = last.val_r2;
  return e;
}

// Rank 0's last lines: accuracy for classes, errors and R² for a regression,
// and where the run's files are.
void print_summary(const Options& o, const TrainingData& d, const train::FitResult& r,
                   const train::EvalResult& test, int ranks) {
  const std::string figures =
      d.regression()
          ? fmt::format("val_loss={:.6g} val_mse={:.6g} val_mae={:.6g} val_r2={:.4f}", test.loss,
                        test.mse, test.mae, test.r2)
          : fmt::format("test_accuracy={:.4f} test_loss={:.4f}", test.accuracy, test.loss);
  const std::string text =
      d.tokens()
          ? fmt::format(
                " test_bpb={:.4f}",
                test.loss / (std::log(2.0) *
                             static_cast<const data::TokenDataset&>(*d.val).bytes_per_token()))
          : "";
  std::printf(
      "kdp-train: %s%s samples_per_s=%.0f wall_time_s=%.1f "
      "epochs=%lld steps=%lld ranks=%d devices_per_rank=%d precision=%s\n",
      figures.c_str(), text.c_str(), r.samples_per_s, r.wall_seconds,
      static_cast<long long>(r.epochs_completed), static_cast<long long>(r.global_step), ranks,
      o.devices, precision_name(r.precision));
  if (!r.last_checkpoint.empty()) std::printf("checkpoint: %s\n", r.last_checkpoint.c_str());
  if (!r.best_checkpoint.empty()) std::printf("best checkpoint: %s\n", r.best_checkpoint.c_str());
  if (!o.metrics.empty()) std::printf("metrics: %s\n", o.metrics.c_str());
}

// What a model of text learns from: tokens, context and the order-0 entropy
// that its validation bits per byte are to fall below.
std::string text_line(const TrainingData& d) {
  const auto& train = static_cast<const data::TokenDataset&>(*d.train);
  const auto& val = static_cast<const data::TokenDataset&>(*d.val);
  return fmt::format(
      "text: {} tokens ({} of them), context {}, {} training and {} validation windows; the "
      "validation text's order-0 entropy is {:.3f} bits per byte (each token by its frequency "
      "alone)",
      train.tokenizer(), train.num_classes(), train.context(), train.size(), val.size(),
      val.order0_bits_per_byte());
}

// --sample: tokens the trained GPT generates after --prompt.
void print_sample(const Options& o, const TrainingData& d, nn::Module& net) {
  const auto& text = static_cast<const data::TokenDataset&>(*d.val);
  const std::vector<int64_t> ids = dynamic_cast<nn::GPT&>(net).generate(
      text.encode(o.prompt), o.sample, o.temperature, o.sample_seed);
  std::printf(
      "kdp-train: sample of %lld tokens (temperature %g, seed %llu) after the prompt:\n%s%s\n",
      static_cast<long long>(o.sample), o.temperature, static_cast<unsigned long long>(o.seed),
      o.prompt.c_str(), text.decode(ids).c_str());
}

int run(Options o, Runtime& runtime, dist::Communicator& comm) {
  const bool rank0 = comm.rank() == 0;
  const int ranks = comm.size();
  check_batch(o, ranks);
  const TrainingData d = load_data(o, comm, sample_form(o.model));

  const std::vector<Device> devs = devices(o.devices);
  const Model m = build_model(o, d, devs[0]);
  if (o.sync_batchnorm) nn::convert_sync_batchnorm(m.net);
  const std::string mode = choose_modes(o, comm, m, d, devs[0]);
  const std::shared_ptr<nn::Module> model = parallel_model(o, m.net, devs, comm);
  const auto optimizer = make_optimizer(o, m.net->named_parameters());
  std::optional<dist::ZeroRedundancyOptimizer> sharded;
  if (o.shard_optimizer) sharded.emplace(*optimizer, comm);
  const auto scheduler = make_scheduler(o, *optimizer);

  // Every sample once per epoch, in batches over all ranks that do not depend
  // on their number: a run resumes at any layout where it stopped.
  data::DistributedSamplerOptions train_sampling;
  train_sampling.seed = o.seed;
  train_sampling.exact = true;
  data::DistributedSamplerOptions test_sampling;
  test_sampling.shuffle = false;
  test_sampling.exact = true;  // every test sample counted once
  data::DataLoaderOptions lo;
  lo.batch_size = o.batch_size / ranks;
  lo.device = devs[0];
  lo.normalise_features = d.features;
  lo.normalise_targets = d.targets;
  data::DataLoader train_loader(d.train,
                                std::make_shared<data::DistributedSampler>(
                                    d.train->size(), ranks, comm.rank(), train_sampling),
                                lo);
  lo.batch_size = std::max<int64_t>(lo.batch_size, 256);
  data::DataLoader test_loader(
      d.val,
      std::make_shared<data::DistributedSampler>(d.val->size(), ranks, comm.rank(), test_sampling),
      lo);

  train::Trainer trainer(trainer_options(o, m, d, devs), comm);
  if (rank0) {
    std::printf(
        "kdp-train: %d rank(s) x %d device(s), %d thread(s) per rank, model %s (%lld "
        "parameters), %s lr %g, global batch %lld, precision %s\n",
        ranks, o.devices, runtime.threads(), m.recorded.c_str(),
        static_cast<long long>(m.net->num_parameters()), o.optimizer.c_str(), o.lr,
        static_cast<long long>(o.batch_size), precision_line(trainer).c_str());
    std::printf("kdp-train: %s\n", mode.c_str());
    if (d.tokens()) std::printf("kdp-train: %s\n", text_line(d).c_str());
    if (const std::string blas = blas_kernel_line(); !blas.empty()) {
      std::printf("kdp-train: %s\n", blas.c_str());
    }
    std::fflush(stdout);
  }
  if (const int signal = signal_before_training(comm); signal != 0) return 128 + signal;
  const nn::LossFunction loss = make_loss(o, d);
  const train::FitResult r =
      trainer.fit(*model, loss, *optimizer, train_loader, &test_loader, scheduler.get());
  if (r.stopped_by_signal) return stopped_by_signal(r, rank0);
  const train::EvalResult test = final_evaluation(r, trainer, *model, loss, test_loader);
  report_traffic(o, comm);
  if (rank0) print_summary(o, d, r, test, ranks);
  if (rank0 && o.sample > 0) print_sample(o, d, *m.net);
  return 0;
}

// What a person can do about a run that may not start, in kdp-train's options.
std::string way_out(io::RunDirectoryError::Reason reason) {
  using Reason = io::RunDirectoryError::Reason;
  const char* discard = "--resume never --overwrite to discard its checkpoints";
  switch (reason) {
    case Reason::OtherConfiguration:
      return fmt::format("Use another --checkpoint-dir, or {}.", discard);
    case Reason::CheckpointOfOtherConfiguration:
      return "Run with the settings it records to resume it, or leave out --resume to start "
             "afresh.";
    case Reason::HoldsThisRun:
      return fmt::format(
          "Add --resume auto to continue that run, use another --checkpoint-dir, or {}.", discard);
    case Reason::NothingToResume:
      return fmt::format(
          "Move them away (they were left as they are), use another --checkpoint-dir, or {}.",
          discard);
    case Reason::WouldFork:
      return "Use --resume auto to continue from the newest, or another --checkpoint-dir for "
             "the resumed run.";
    case Reason::MetricsFileExists:
      return "Use another --metrics file, --resume auto to continue the run that wrote it, or "
             "--resume never --overwrite to replace it.";
    case Reason::InUse:
      return "Wait for that run to end, or use another --checkpoint-dir and --metrics file.";
    case Reason::CannotLock:
      return "Use a file system with locks (Lustre mounted with -o flock, NFS with a lock "
             "manager), or pass --without-locks if you make sure that one run at a time uses "
             "these files.";
    case Reason::NotKdpFile:
      return "kdp leaves it as it is: move it away, or use another path.";
  }
  return "";
}

// A run that fails because a signal arrived ends with the signal's status.
int failed(const std::string& message, int rank) {
  if (StopSignal::requested()) {
    if (rank == 0) {
      std::fprintf(stderr, "kdp-train: stopped by signal %d: %s\n", StopSignal::signal(),
                   message.c_str());
    }
    return 128 + StopSignal::signal();
  }
  std::fprintf(stderr, "kdp-train: error on rank %d: %s\n", rank, message.c_str());
  return 1;
}

// Rank 0's exit status in --status-file, for batch scripts whose launcher
// reports a status of its own (mpirun after forwarding a signal).
void record_status(const std::string& path, int status) {
  if (path.empty()) return;
  try {
    io::write_file_atomically(path, fmt::format("{}\n", status));
  } catch (const Error& e) {
    std::fprintf(stderr, "kdp-train: %s\n", e.what());
  }
}

// Rank 0 applies kdp's rule for output files to --status-file before the run
// starts: every rank stops when it refuses. Returns the path the status may be
// written to (empty for none).
std::string claim_status_file(const Options& o, dist::Communicator& comm) {
  if (o.status_file.empty()) return "";
  int64_t refused = 0;
  if (comm.rank() == 0) {
    try {
      io::claim_output(o.status_file, io::OutputKind::status(), o.overwrite, "");
    } catch (const Error& e) {
      std::fprintf(stderr, "kdp-train: error: --status-file: %s\n", e.message().c_str());
      refused = 1;
    }
  }
  comm.allreduce(&refused, 1, dist::ReduceOp::Max);
  return refused != 0 ? "" : o.status_file;
}

// Runs kdp-train as `o` says; rank 0's status goes to --status-file (once it
// has been claimed) before MPI finalizes (a launcher that is tearing the job
// down may never let it return).
int main_with_options(Options& o, int argc, char** argv) {
  int rank = 0;
  int status = 1;
  std::string status_path;
  try {
    RuntimeOptions ro;
    ro.threads = o.threads;
    ro.seed = o.seed;
    Runtime runtime(argc, argv, ro);
    rank = runtime.world_rank();
    dist::Communicator world = dist::Communicator::world();
    status_path = claim_status_file(o, world);
    if (!o.status_file.empty() && status_path.empty()) return 1;
    try {
      status = run(o, runtime, world);
    } catch (const io::RunDirectoryError& e) {
      // Every rank has the same error: one message is enough.
      if (rank == 0) {
        std::fprintf(stderr, "kdp-train: error: %s\n%s%s\n", e.summary().c_str(),
                     e.details().c_str(), way_out(e.reason()).c_str());
      }
      status = 1;
    } catch (const Error& e) {
      status = failed(e.what(), rank);
    }
    if (rank == 0) record_status(status_path, status);
    return status;
  } catch (const std::exception& e) {
    status = failed(e.what(), rank);
  }
  if (rank == 0) record_status(status_path, status);
  return status;
}

}  // namespace

namespace {}  // namespace

int main(int argc, char** argv) {
  use_the_cpus_blas_kernels(argv);
  // First of all: SIGTERM, SIGINT or SIGUSR1 from now on are noted, not fatal,
  // so a job stopped during start-up still ends with a message.
  StopSignal stop_signal;
  // A launcher that forwards a signal (mpirun) may stop relaying output at
  // once: a write to that pipe must fail, not kill the rank before its checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  Options o;
  CLI::App app{"kdp-train: data-parallel training of an MLP on an HDF5 dataset"};
  cli::use_plain_messages(app, "kdp-train");
  app.allow_extras();  // checked below: only --kokkos-* arguments (Kokkos') may be left
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_data_options(app, o);
  add_training_options(app, o);
  add_file_options(app, o);
  add_distributed_options(app, o);
  add_run_options(app, o);
  if (const int status = cli::parse(app, argc, argv); status >= 0) return status;
  if (const int status = cli::reject_unknown(app, app.remaining(), "kdp-train", {"--kokkos-"});
      status >= 0) {
    return status;
  }
  if ((o.scheduler == "multistep") != !o.milestones.empty()) {
    std::fprintf(stderr, "kdp-train: --milestones and --scheduler multistep go together\n");
    return 1;
  }
  if (o.overwrite && o.resume != "never") {
    std::fprintf(stderr,
                 "kdp-train: --overwrite discards what --checkpoint-dir holds; it goes with "
                 "--resume never, not --resume %s\n",
                 o.resume.c_str());
    return 1;
  }
  return main_with_options(o, argc, argv);
}
