// ZeroRedundancyOptimizer (ZeRO-1) against the replicated optimizer: Adam in a
// DistributedDataParallel step of L (784-1024-1024-10, batch 256 per rank)
// and of XL (784, seven layers of 4096, 10: 104 M parameters, batch 8 per rank),
// under mpirun at 2 and 4 ranks (scripts/perf.sh).
//
//   ZERO state_<model>_r<N>  this rank's optimizer state / the replicated
//                            optimizer's (target <= 1/N + 0.05)
//   ZERO step_<model>_r<N>   the median sharded step / the median replicated
//                            step, both measured in the same run taking turns
//                            (target <= 1.05)
//   ZERO gathered_<model>_r<N>  the optimizer state a rank other than 0 holds
//                            while a checkpoint is gathered (onto rank 0) /
//                            the replicated optimizer's (target <= 1/N + 0.05),
//                            and the gather's time beside the step's (INFO)
//
//   ZERO save_slices_<model>_r<N>  the time to write a checkpoint with every
//                            rank writing its own slice of the state / with
//                            rank 0 gathering the state and writing it, both
//                            in the same run, taking turns
//   ZERO save_memory_<model>_r<N>  rank 0's peak memory growth while writing
//                            the checkpoint in slices (its resident set's
//                            high-water mark, reset before each write) / the
//                            replicated optimizer's state (target <= 1/N +
//                            0.05; gathering's growth beside it, INFO)
//
//   --kdp_quick (a few steps of L only: the smoke test)
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "kdp/kdp.hpp"
#include "rank_bench.hpp"

using namespace kdp;

namespace {

struct Setup {
  std::string name;
  std::vector<int64_t> layers;
  int64_t batch;  // per rank
  int steps;      // timed, per turn
};

// One model, DDP and Adam; sharded when `zero`.
struct Trainee {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Adam> adam;
  std::unique_ptr<dist::ZeroRedundancyOptimizer> zero;

  Trainee(const Setup& s, dist::Communicator& comm, bool sharded) {
    manual_seed(1);
    model = nn::mlp(s.layers);
    ddp = std::make_unique<dist::DistributedDataParallel>(model, comm);
    adam = std::make_unique<optim::Adam>(model->named_parameters(), optim::AdamOptions{});
    if (sharded) zero = std::make_unique<dist::ZeroRedundancyOptimizer>(*adam, comm);
  }
  // Seconds of `steps` steps, the slowest rank's.
  double run(const Tensor& x, const Tensor& y, int steps, dist::Communicator& comm) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      adam->zero_grad();
      cross_entropy(ddp->forward(x), y).backward();
      adam->step();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    comm.allreduce(&s, 1, dist::ReduceOp::Max);
    return s / steps;
  }
  size_t state_bytes() const { return adam->state_bytes(); }
  // Bytes of the state state_dict() gives on this rank after gather_state(),
  // and the gather's seconds (the slowest rank's).
  std::pair<double, double> gathered(dist::Communicator& comm) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    adam->gather_state();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    comm.allreduce(&s, 1, dist::ReduceOp::Max);
    double bytes = 0;
    for (const auto& [name, entries] : adam->state_dict().tensors) {
      for (const auto& [key, t] : entries) bytes += static_cast<double>(t.numel()) * sizeof(float);
    }
    return {bytes, s};
  }
};

// Resident bytes now and at their peak since the last reset_peak() (Linux;
// zero where /proc does not say).
int64_t status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::strlen(field)) * 1024;
  }
  return 0;
}
void reset_peak() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

// Rank 0's text on every rank.
std::string from_rank0(dist::Communicator& comm, const std::string& text) {
  const auto all = comm.allgather_bytes(text.data(), text.size());
  return std::string(all.front().begin(), all.front().end());
}

// One checkpoint of `t` at `path`: in slices (every rank its own) or gathered
// onto rank 0. Seconds (the slowest rank's) and rank 0's peak memory growth.
std::pair<double, double> save(Trainee& t, const std::string& path, bool slices,
                               dist::Communicator& comm) {
  reset_peak();
  const int64_t before = status_bytes("VmRSS:");
  io::TrainingState st;
  st.world_size = comm.size();
  const double s = perf::timed_on_all_ranks(comm, [&] {
    if (!slices) {
      t.adam->gather_state();
      if (comm.rank() == 0) io::save_checkpoint(path, *t.model, *t.adam, st);
      comm.barrier();
      return;
    }
    const std::optional<optim::OptimizerState> layout = t.adam->state_layout();
    std::optional<io::SlicedCheckpoint> file;
    if (comm.rank() == 0) file.emplace(path, *t.model, *t.adam, *layout, st);
    const std::string plan = from_rank0(comm, file ? file->plan() : "");
    std::string why;
    if (!io::write_state_slices(plan, *t.adam, comm.rank(), &why)) throw IOError(why);
    comm.barrier();
    if (file) file->commit();
  });
  return {s, static_cast<double>(status_bytes("VmHWM:") - before)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Checkpoints of `sharded` written both ways, taking turns, into a directory
// rank 0 makes (and removes) for them; `replicated`: the replicated state's bytes.
void report_saves(const Setup& s, Trainee& sharded, double replicated, dist::Communicator& comm,
                  int turns, const Tensor& x, const Tensor& y) {
  const int n = comm.size();
  std::string dir;
  if (comm.rank() == 0) {
    dir = (std::filesystem::temp_directory_path() / fmt::format("kdp-bench-zero-{}", ::getpid()))
              .string();
    std::filesystem::create_directories(dir);
  }
  dir = from_rank0(comm, dir);
  std::vector<double> gather_s, slices_s;
  double gather_grown = 0, slices_grown = 0;
  sharded.run(x, y, 1, comm);  // a step: an earlier gathered state is let go
  for (int t = 0; t < turns; ++t) {
    const auto [ss, sm] = save(sharded, dir + "/slices.h5", true, comm);
    const auto [gs, gm] = save(sharded, dir + "/gathered.h5", false, comm);
    sharded.run(x, y, 1, comm);  // a step: the gathered state is let go
    gather_s.push_back(gs);
    slices_s.push_back(ss);
    gather_grown = std::max(gather_grown, gm);
    slices_grown = std::max(slices_grown, sm);
  }
  comm.barrier();
  if (comm.rank() != 0) return;
  std::filesystem::remove_all(dir);
  std::printf(
      "INFO  %s: a checkpoint written in slices %.3f s, gathered onto rank 0 %.3f s; rank 0's "
      "peak memory grew by %.1f MB in slices, %.1f MB gathering (the state: %.1f MB)\n",
      s.name.c_str(), median(slices_s), median(gather_s), slices_grown * 1e-6, gather_grown * 1e-6,
      replicated * 1e-6);
  std::printf("ZERO save_slices_%s_r%d %.3f (target <= 1.00)\n", s.name.c_str(), n,
              median(slices_s) / median(gather_s));
  std::printf("ZERO save_memory_%s_r%d %.3f (target <= %.3f)\n", s.name.c_str(), n,
              slices_grown / replicated, 1.0 / n + 0.05);
}

void report_steps(const Setup& s, const Trainee& replicated, const std::vector<double>& plain_s,
                  const std::vector<double>& zero_s, const double state[2], double held,
                  double gather_s, int n);

void measure(const Setup& s, dist::Communicator& comm, int turns, int save_turns) {
  const int n = comm.size();
  const Tensor x = Tensor::randn({s.batch, s.layers.front()});
  std::vector<float> labels(static_cast<size_t>(s.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 10);
  const Tensor y = Tensor::from_host(labels, {s.batch});
  Trainee replicated(s, comm, false), sharded(s, comm, true);
  replicated.run(x, y, 1, comm);  // warm: state allocated, buffers touched
  sharded.run(x, y, 1, comm);
  std::vector<double> plain_s, zero_s;
  for (int t = 0; t < turns; ++t) {  // taking turns: a busy machine slows both alike
    plain_s.push_back(replicated.run(x, y, s.steps, comm));
    zero_s.push_back(sharded.run(x, y, s.steps, comm));
  }
  double state[2] = {static_cast<double>(replicated.state_bytes()),
                     static_cast<double>(sharded.state_bytes())};
  comm.allreduce(state, 2, dist::ReduceOp::Max);  // the fullest rank's
  auto [held, gather_s] = sharded.gathered(comm);
  if (comm.rank() == 0) held = 0;  // rank 0 holds the whole state to write it
  comm.allreduce(&held, 1, dist::ReduceOp::Max);
  if (comm.rank() == 0) report_steps(s, replicated, plain_s, zero_s, state, held, gather_s, n);
  if (n > 1) report_saves(s, sharded, state[0], comm, save_turns, x, y);
}

void report_steps(const Setup& s, const Trainee& replicated, const std::vector<double>& plain_s,
                  const std::vector<double>& zero_s, const double state[2], double held,
                  double gather_s, int n) {
  std::printf(
      "INFO  %s: %lld parameters, %d ranks; step %.2f ms replicated, %.2f ms sharded; "
      "optimizer state per rank %.1f MB replicated, %.1f MB sharded\n",
      s.name.c_str(), static_cast<long long>(replicated.model->num_parameters()), n,
      1e3 * median(plain_s), 1e3 * median(zero_s), state[0] * 1e-6, state[1] * 1e-6);
  std::printf("ZERO state_%s_r%d %.3f (target <= %.3f)\n", s.name.c_str(), n, state[1] / state[0],
              1.0 / n + 0.05);
  std::printf("ZERO step_%s_r%d %.3f (target <= 1.05)\n", s.name.c_str(), n,
              median(zero_s) / median(plain_s));
  if (n > 1) {
    std::printf("INFO  %s: gathering the state onto rank 0 for a checkpoint %.2f ms (%.2f steps)\n",
                s.name.c_str(), 1e3 * gather_s, gather_s / median(zero_s));
    std::printf("ZERO gathered_%s_r%d %.3f (target <= %.3f)\n", s.name.c_str(), n, held / state[0],
                1.0 / n + 0.05);
  }
}

}  // namespace

int main(int argc, char** argv) {
  kdp::use_the_cpus_blas_kernels(argv);  // before MPI and Kokkos start
  const bool quick = perf::take_quick_flag(argc, argv);
  Runtime runtime(argc, argv);
  dist::Communicator comm = dist::Communicator::world();
  if (comm.rank() == 0) {
    std::printf("ranks: %d, threads per rank: %d\n", comm.size(), runtime.threads());
  }
  const int turns = quick ? 1 : 5;  // L's steps and saves alike
  measure({"L", {784, 1024, 1024, 10}, 256, quick ? 2 : 10}, comm, turns, turns);
  if (!quick) {
    std::vector<int64_t> xl{784};
    for (int i = 0; i < 7; ++i) xl.push_back(4096);
    xl.push_back(10);
    // A turn of steps takes seconds: two give a spread. A save writes 0.8 GB,
    // and the slices beat the gathered save several times over: one of each.
    measure({"XL", xl, 8, 2}, comm, 2, 1);
  }
  return 0;
}
