#include "kdp/train/modes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "exact/shard_batch_norm.hpp"
#include "exact/shard_pass.hpp"
#include "kdp/exact/one_pass.hpp"
#include "kdp/nn/batch_norm.hpp"

namespace kdp::train {

namespace {

// Whether a BatchNorm layer of `model` is synchronised (SyncBatchNorm).
bool synchronised(nn::Module& model) {
  const auto bn = exact::batch_norms(model);
  return std::any_of(bn.begin(), bn.end(),
                     [](const auto& named) { return named.second->synchronizes_replicas(); });
}

// Why reproducible mode would cost more than DDP's step or change what the
// run computes: what stands in its way for this model and request first,
// else its cost on the CPUs measured (docs/performance.md: for the one pass
// 0.93-1.01x DDP's step at 2 and 4 ranks of one thread on Intel Xeon with
// AMX, but 1.8x at one rank of 2 threads, where kdp's own products split
// between threads), which is more than a default may cost (1.10x) on every
// CPU and layout.
std::string why_not_reproducible(const ModeRequest& r, nn::Module& model, int ranks,
                                 bool in_one_pass_everywhere) {
  if (!r.comm_hook.empty()) {
    return fmt::format("the comm hook {} reduces the gradients instead", r.comm_hook);
  }
  if (r.shards < 1 || r.shards % ranks != 0) {
    return fmt::format("{} ranks do not divide its {} shards", ranks, r.shards);
  }
  if (r.devices_per_rank > 1) {
    return fmt::format("it would compute on the first of the {} devices only", r.devices_per_rank);
  }
  if (synchronised(model)) {
    return "with SyncBatchNorm its shards would go through copies of the model, which costs more";
  }
  if (!exact::batch_norms(model).empty()) {
    return "it would normalise each shard's samples apart in BatchNorm";
  }
  if (!reproducible_in_one_pass(model, model.named_parameters(), r.input_dims, Precision::fp32)) {
    return "this model's shards would go one by one, which costs more (one pass takes Linear, "
           "ReLU, LeakyReLU, Dropout and Flatten layers alone)";
  }
  if (!in_one_pass_everywhere) {
    return "its shards would go one by one in bf16 on a CPU without AVX2, which costs more";
  }
  return "its products cost up to 1.8x DDP's step at 2 threads a rank on some CPUs";
}

// "the same weights, bit for bit, at 1, 2, 3, 4, 6, 12 rank(s) ...", and how
// a rank's shards go (make_shard_step's choice).
std::string on_line(const ModeRequest& r, nn::Module& model, bool in_one_pass_everywhere) {
  std::vector<int> divisors;
  for (int ranks = 1; ranks <= r.shards; ++ranks) {
    if (r.shards % ranks == 0) divisors.push_back(ranks);
  }
  const char* how =
      synchronised(model) ? "together, through copies of the model"
      : in_one_pass_everywhere && reproducible_in_one_pass(model, model.named_parameters(),
                                                           r.input_dims, Precision::fp32)
          ? "in one pass"
          : "one by one";
  return fmt::format(
      "reproducible mode on: the same weights, bit for bit, at {} rank(s) with any devices and "
      "threads (shards {})",
      fmt::join(divisors, ", "), how);
}

}  // namespace

Precision agree_precision(Precision asked, const Device& device, dist::Communicator& comm) {
  Precision p = resolve_precision(asked, device);
  if (asked == Precision::Auto && comm.size() > 1) {
    int64_t bf16 = p == Precision::bf16 ? 1 : 0;
    comm.allreduce(&bf16, 1, dist::ReduceOp::Min);
    p = bf16 == 1 ? Precision::bf16 : Precision::fp32;
  }
  return p;
}

ModeDecision decide_modes(const ModeRequest& request, nn::Module& model, dist::Communicator& comm,
                          const Device& device) {
  ModeDecision d;
  d.precision = agree_precision(request.precision, device, comm);
  if (request.reproducible == ReproducibleMode::Off) {
    d.reason = "reproducible mode off (asked)";
    return d;
  }
  // Whether every rank could take the one pass in this precision (the
  // Trainer agrees on it as well).
  const bool everywhere = exact::one_pass_precision(d.precision, comm);
  if (request.reproducible == ReproducibleMode::On) {
    d.reproducible = true;
    d.reason = on_line(request, model, everywhere);
    return d;
  }
  // Off on every rank alike; the reason is this rank's (rank 0's is printed).
  d.why_off = why_not_reproducible(request, model, comm.size(), everywhere);
  d.reason = "reproducible mode off: " + d.why_off;
  return d;
}

}  // namespace kdp::train
