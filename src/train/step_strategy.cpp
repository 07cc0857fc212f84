#include "step_strategy.hpp"

#include "kdp/ops/reduction.hpp"

namespace kdp::train::detail {

EpochSums::EpochSums(const Device& device, int shards)
    : loss_sum(Tensor::zeros(Shape{}, device)), correct(Tensor::zeros(Shape{}, device)) {
  if (shards > 0) {
    shard_loss = Tensor::zeros({shards}, device);
    shard_correct = Tensor::zeros({shards}, device);
  }
}

void EpochSums::add(const Tensor& loss, float n, const Tensor& out, const Tensor& labels,
                    int shard) {
  const Tensor l = loss.to(loss_sum.device());
  loss_sum.add_(l, n);
  Tensor c;
  // Sequences [B, T, V] against their next tokens [B, T]: a sample counts
  // the share of its T positions predicted right.
  const bool sequences = out.defined() && out.dim() == 3 && labels.dim() == 2;
  if (sequences || (out.defined() && out.dim() == 2 && labels.dim() == 1)) {
    const int64_t positions = labels.numel();
    c = count_correct(out.reshape({positions, out.size(out.dim() - 1)}),
                      labels.to(out.device()).reshape({positions}))
            .to(correct.device());
    if (sequences) c.mul_(1.0f / static_cast<float>(labels.size(1)));
    correct.add_(c);
  }
  if (shard < 0 || !shard_loss.defined()) return;
  shard_loss.slice(0, shard, shard + 1).add_(l.reshape({1}), n);
  if (c.defined()) shard_correct.slice(0, shard, shard + 1).add_(c.reshape({1}));
}

std::unique_ptr<StepStrategy> make_step_strategy(const StepEnv& env, const EpochLayout& layout) {
  return env.options.reproducible ? make_shard_step(env, layout) : make_default_step(env);
}

}  // namespace kdp::train::detail
