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
//   --kdp_quick (a few steps of L only: the smoke test)
#include <algorithm>
#include <chrono>
#include <cstdio>
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void measure(const Setup& s, dist::Communicator& comm, int turns) {
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
  if (comm.rank() != 0) return;
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
  const bool quick = perf::take_quick_flag(argc, argv);
  Runtime runtime(argc, argv);
  dist::Communicator comm = dist::Communicator::world();
  if (comm.rank() == 0) {
    std::printf("ranks: %d, threads per rank: %d\n", comm.size(), runtime.threads());
  }
  measure({"L", {784, 1024, 1024, 10}, 256, quick ? 2 : 10}, comm, quick ? 1 : 5);
  if (!quick) {
    std::vector<int64_t> xl{784};
    for (int i = 0; i < 7; ++i) xl.push_back(4096);
    xl.push_back(10);
    measure({"XL", xl, 8, 2}, comm, 3);
  }
  return 0;
}
