// FitRun's independence of the layout: the epoch every rank agrees on, the
// step strategy chosen for it, and the stand-in batch of a rank with no share
// of a batch.
#include <fmt/format.h>

#include "core/check.hpp"
#include "fit_run.hpp"

namespace kdp::train::detail {

// The epoch every rank steps through: as many batches as the rank with the
// most (a sampler that gives every sample once, as DistributedSampler's exact
// mode, may leave a rank without a share of the last batch: it takes part
// with none, see train_epoch), and the global batch that a checkpoint's
// position is counted in. The step strategy is chosen for it, once.
void FitRun::agree_on_epoch() {
  const int64_t samples = in_.train_loader.sampler().size();
  // Over every rank: the most batches and the fewest samples (as the most of
  // their negation), and the sums of the batch sizes and samples.
  int64_t most[2] = {in_.train_loader.num_batches(), -samples};
  int64_t sums[2] = {in_.train_loader.options().batch_size, samples};
  if (comm_.size() > 1) {
    comm_.allreduce(most, 2, dist::ReduceOp::Max);
    comm_.allreduce(sums, 2, dist::ReduceOp::Sum);
  }
  const int64_t fewest = -most[1];
  KDP_CHECK(fewest > 0 || most[0] == 0, ValueError,
            "a rank's sampler gives it no training sample per epoch (rank {}'s gives {}, {} "
            "ranks in all): give every rank a share, or use fewer ranks",
            comm_.rank(), samples, comm_.size());
  batches_ = most[0];
  global_batch_ = sums[0];
  const StepEnv env{in_, bare_, o_, comm_, exchange_, result_.precision, classes_, test_};
  strategy_ = make_step_strategy(env, EpochLayout{global_batch_, sums[1]});
  result_.step_strategy = strategy_->name();
}

// A batch this rank trained on, for a micro-batch it has no share of: the last
// one, or (right after resuming) the first of the epoch.
const data::Batch& FitRun::stand_in_batch(int64_t epoch) {
  if (!last_batch_) {
    data::DataLoader& loader = in_.train_loader;
    loader.set_epoch(epoch);
    last_batch_ = *loader.begin();
  }
  return *last_batch_;
}

}  // namespace kdp::train::detail
