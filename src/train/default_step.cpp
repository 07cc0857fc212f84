// The default step: each micro-batch through the model as the caller wrapped
// it (DistributedDataParallel exchanges the gradients on a step's last one).
#include <optional>

#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/ops/elementwise.hpp"
#include "step_strategy.hpp"

namespace kdp::train::detail {

namespace {

class DefaultStep final : public StepStrategy {
 public:
  explicit DefaultStep(const StepEnv& env) : env_(env) {}
  std::string name() const override { return "default"; }
  bool runs_stand_in() const override { return true; }
  Tensor micro_batch(const MicroBatch& m, EpochSums& sums) override;

 private:
  float share_of_last_batch(int64_t samples) const;
  StepEnv env_;
};

// Without a share of the micro-batch (`m.batch` null), the rank runs a batch
// it trained on before with weight 0: every rank runs the same collectives
// (DDP's, SyncBatchNorm's) and its gradient adds nothing.
Tensor DefaultStep::micro_batch(const MicroBatch& m, EpochSums& sums) {
  const TrainerOptions& o = env_.options;
  const data::Batch& batch = m.batch != nullptr ? *m.batch : *m.stand_in;
  const int64_t n = m.batch != nullptr ? batch.features.size(0) : 0;
  // The epoch's last batch may be shared unevenly: each rank's mean is weighted
  // by its share, so that the average over ranks is the mean over the batch.
  const float share = m.last_of_epoch ? share_of_last_batch(n) : 1.0f;
  std::optional<nn::GradientExchange::Pause> no_sync;
  if (env_.exchange != nullptr && !m.last_of_step) no_sync.emplace(*env_.exchange);
  Tensor out, loss;
  {
    trace::Region region("kdp::train::forward", "compute");
    env_.test.straggle();
    autocast mixed(env_.precision);
    out = env_.in.model.forward(batch.features);
    loss = env_.in.loss(out, batch.labels);
  }
  {
    trace::Region region("kdp::train::backward", "compute");
    const float scale = share / static_cast<float>(o.accumulate_grad_batches);
    (scale != 1.0f ? loss * scale : loss).backward();
  }
  NoGradGuard no_grad;
  if (m.batch != nullptr) {
    sums.add(loss.detach(), static_cast<float>(n), env_.classes ? out.detach() : Tensor(),
             batch.labels);
  }
  if (!o.detect_anomaly) return Tensor();
  // A stand-in batch's loss is checked as weighted: 0 when finite.
  return m.batch != nullptr ? loss.detach() : loss.detach() * 0.0f;
}

// This rank's weight in the mean over a batch whose `samples` here are part of
// one batch over all ranks: samples x ranks / the batch's samples (1 when
// every rank has the same count).
float DefaultStep::share_of_last_batch(int64_t samples) const {
  dist::Communicator& comm = env_.comm;
  if (comm.size() == 1) return 1.0f;
  int64_t total = samples;
  comm.allreduce(&total, 1, dist::ReduceOp::Sum);
  if (total == 0) return 0.0f;
  return static_cast<float>(static_cast<double>(samples) * comm.size() /
                            static_cast<double>(total));
}

}  // namespace

std::unique_ptr<StepStrategy> make_default_step(const StepEnv& env) {
  return std::make_unique<DefaultStep>(env);
}

}  // namespace kdp::train::detail
