#pragma once
/// \file
/// DistributedDataParallel: one model replica per MPI rank, gradients averaged
/// across ranks (PyTorch's DistributedDataParallel, Horovod's
/// DistributedOptimizer).
///
/// Construction checks that every rank holds the same parameters (names, shapes,
/// order) with one allgather of a compact signature; on a mismatch every rank
/// throws a CommError naming the first differing parameter and the ranks
/// involved. It then broadcasts rank 0's parameters and buffers.
///
/// Gradients live in fused buckets (reverse parameter order; a first bucket of
/// first_bucket_mb, then bucket_cap_mb each); each parameter's .grad() is a view
/// into its bucket. The moment the last gradient of a bucket is final, a hook
/// launches a non-blocking allreduce of the bucket, so communication overlaps
/// the rest of backward; buckets are launched in the same order on every rank.
/// When the last bucket is launched the reductions are awaited, so backward()
/// returns with averaged gradients and the optimizer can step. Inside no_sync()
/// gradients accumulate locally; the first backward after it reduces the sum.
///
/// Overlap needs something to run the communication while backward computes:
/// a network that moves the bytes (across nodes the communication thread waits
/// for it with pauses, leaving its core to backward), a GPU, or a core that no
/// compute thread uses. Inside one node shared-memory reductions are the CPU's
/// own work, so where every core runs a compute thread the communication takes
/// turns with backward; DDPOptions::overlap chooses (docs/performance.md and
/// docs/scaling.md have the figures). A bucket cannot start before its last
/// gradient is final: the first layer's bucket always waits for the end of
/// backward. Each bucket is reduced by the communication hook (comm_hook.hpp).

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kdp/dist/comm_hook.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/dist/gradient_bucket.hpp"
#include "kdp/nn/module.hpp"

namespace kdp::dist {

/// Bucket sizes and the handling of unused parameters and buffers.
struct DDPOptions {
  /// Bucket size in MB; 0 (the default) chooses by where the ranks are:
  /// 25 MB (PyTorch's) when they share one node, 4 MB across nodes, where
  /// buckets of about a layer start the network earlier in backward (a deep
  /// MLP on 2 emulated nodes at 1 Gbit/s: 10 % shorter steps; on one node 4 MB
  /// cost 8 %; docs/scaling.md).
  double bucket_cap_mb = 0.0;
  double first_bucket_mb = 1.0;
  /// Parameters that took no part in a forward count as ready (their bucket
  /// slot is reduced as it is). Without it such parameters are an error at
  /// forward time, naming them, instead of a reduction that never completes.
  bool find_unused_parameters = false;
  /// Broadcast rank 0's buffers before every forward (as PyTorch's DDP), but
  /// those of synchronised layers (SyncBatchNorm), which every rank computes
  /// identically.
  bool broadcast_buffers = true;
  /// When buckets are reduced: each as soon as it is ready during backward
  /// (Always), or all of them once backward has produced the last gradient
  /// (Never: for nodes where every core runs a compute thread and the
  /// communication thread could only take turns with backward). Buckets are
  /// launched in the same order on every rank either way.
  enum class Overlap { Always, Never };
  Overlap overlap = Overlap::Always;
  /// What reduces each bucket (comm_hook.hpp); null: allreduce_hook().
  std::shared_ptr<CommHook> comm_hook;

  /// Chained setters, one per option, to name each where it is set:
  /// DDPOptions{}.with_bucket_cap_mb(...).with_overlap(...).
  DDPOptions& with_bucket_cap_mb(double value) {
    bucket_cap_mb = value;
    return *this;
  }
  DDPOptions& with_first_bucket_mb(double value) {
    first_bucket_mb = value;
    return *this;
  }
  DDPOptions& with_find_unused_parameters(bool value) {
    find_unused_parameters = value;
    return *this;
  }
  DDPOptions& with_broadcast_buffers(bool value) {
    broadcast_buffers = value;
    return *this;
  }
  DDPOptions& with_overlap(Overlap value) {
    overlap = value;
    return *this;
  }
  DDPOptions& with_comm_hook(std::shared_ptr<CommHook> value) {
    comm_hook = std::move(value);
    return *this;
  }
};

/// Averages gradients over MPI ranks in buckets overlapped with backward.
class DistributedDataParallel : public nn::Module, public nn::GradientExchange {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, Communicator comm,
                          DDPOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& input) override;
  Tensor forward(const nn::TensorList& inputs) override;

  /// Replaces the communication hook (between steps only: a StateError while a
  /// backward's reductions are under way).
  void register_comm_hook(std::shared_ptr<CommHook> hook);
  const CommHook& comm_hook() const { return *hook_; }

  /// Waits for the reductions launched so far (backward calls it when the last
  /// bucket is launched; calling it again is harmless).
  void finish() override;

  /// While alive, backward accumulates gradients locally without communication.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  std::shared_ptr<nn::Module> wrapped() const override { return module_; }
  Communicator& communicator() { return comm_; }
  const DDPOptions& options() const { return options_; }
  /// The bucket size in use, in MB (bucket_cap_mb, or the one it chose).
  double bucket_cap_mb() const { return bucket_cap_mb_; }
  /// The parameter names of each bucket, in launch order.
  std::vector<std::vector<std::string>> bucket_layout() const;
  /// Completed gradient reductions (one per synchronised backward).
  int64_t reductions() const { return reductions_; }
  /// Seconds spent waiting for reductions that had not finished when backward
  /// did (communication not hidden behind computation), in total.
  double comm_wait_seconds() const override { return comm_wait_seconds_; }

  // nn::GradientExchange: the Trainer's view of DDP.
  nn::GradientExchange* gradient_exchange() override { return this; }
  bool exchanging() const override { return sync_; }
  void set_exchanging(bool on) override { sync_ = on; }
  nn::Module& local_module() override { return *module_; }

 private:
  void check_same_model_on_all_ranks();
  void broadcast_state();
  void build_buckets();
  void on_grad_ready(size_t index, Tensor& grad);
  void mark_ready(size_t index);
  void launch_ready_buckets();
  void check_unused(const std::vector<Tensor>& outputs);
  void reset_pass();

  std::shared_ptr<nn::Module> module_;
  Communicator comm_;
  DDPOptions options_;
  nn::NamedTensors params_;  // those that require grad, in module order
  std::vector<std::unique_ptr<GradientBucket>> buckets_;
  std::vector<std::pair<size_t, size_t>> slot_of_;  // parameter -> (bucket, slot)
  std::vector<uint64_t> hook_ids_;
  std::shared_ptr<CommHook> hook_;
  double bucket_cap_mb_ = 0.0;

  std::recursive_mutex mutex_;
  std::vector<bool> ready_;
  size_t next_bucket_ = 0;
  int hooks_fired_ = 0;
  bool sync_ = true;
  int64_t reductions_ = 0;
  double comm_wait_seconds_ = 0.0;
};

}  // namespace kdp::dist
