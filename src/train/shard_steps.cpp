// Reproducible mode's steps: each global batch cut into virtual shards by
// position, each shard's gradient its own, and the shards summed exactly over
// every rank (src/exact/), so that the layout does not show in the bits.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "core/check.hpp"
#include "exact/exact_gradient.hpp"
#include "exact/shard_batch_norm.hpp"
#include "exact/shard_pass.hpp"
#include "exact/shard_replicas.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/generator.hpp"
#include "kdp/core/threads.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/data/distributed_sampler.hpp"
#include "kdp/ops/activation.hpp"
#include "kdp/ops/elementwise.hpp"
#include "kdp/parallel/parallel_apply.hpp"
#include "step_strategy.hpp"

namespace kdp::train::detail {

using exact::ShardRows;

namespace {

// What every reproducible step shares: the exact sum, BatchNorm per shard,
// and a micro-batch's frame (its shards on this rank, then the exact sum over
// every rank's). The strategies below differ in how the rank's shards go
// forward and backward (pass()).
class ShardedStep : public StepStrategy {
 public:
  ShardedStep(const StepEnv& env, int blas_threads);
  int shards() const override { return env_.options.shards; }
  Tensor micro_batch(const MicroBatch& m, EpochSums& sums) final;

 protected:
  // This rank's `shards` of `b` (of `total` samples over every rank, `filled`
  // shards with samples) forward and backward, each kept by the exact sum;
  // returns the sum of their weighted losses.
  virtual Tensor pass(const MicroBatch& m, const std::vector<ShardRows>& shards, int64_t total,
                      int filled, EpochSums& sums) = 0;
  // A micro-batch of which this rank holds no shard.
  virtual void without_shards() const {}
  float shard_weight(int64_t samples, int64_t total) const;
  std::vector<uint64_t> sample_keys(const MicroBatch& m, const ShardRows& rows) const;
  const Device& home() const { return env_.options.devices.front(); }

  StepEnv env_;
  ScopedBlasThreads one_blas_thread_{1};
  exact::ExactGradient exact_;
  exact::ShardBatchNorm shard_bn_;
};

// A multi-threaded BLAS (or oneDNN, which takes the BLAS's count) may split a
// product's sums by its thread count: one thread gives every layout the same
// bits, whatever threads a rank has. The one pass's own products (row_gemm)
// keep the rank's threads (`blas_threads`, read before): their bits do not
// depend on the split.
ShardedStep::ShardedStep(const StepEnv& env, int blas_threads)
    : env_(env),
      exact_(env.in.optimizer.parameters(), env.comm, env.options.devices.front(), blas_threads),
      shard_bn_(env.bare, env.comm) {}

// Each of the batch's shards on this rank forward and backward (loss weighted
// by its share of the global batch, and by 1 / the micro-batches per step as
// without this mode), then the exact sum over every rank's shards, added to
// the step's earlier micro-batches' in their order.
Tensor ShardedStep::micro_batch(const MicroBatch& m, EpochSums& sums) {
  const TrainerOptions& o = env_.options;
  dist::Communicator& comm = env_.comm;
  const int64_t n = m.batch != nullptr ? m.batch->features.size(0) : 0;
  int64_t total = n;
  comm.allreduce(&total, 1, dist::ReduceOp::Sum);
  NoGradGuard outside;
  Tensor step_loss = Tensor::zeros({}, home());
  // The shards with samples, over every rank: 0 .. min(shards, total) - 1.
  const int filled = static_cast<int>(std::min<int64_t>(o.shards, total));
  shard_bn_.begin();
  if (n > 0) {
    step_loss =
        pass(m, exact::shard_rows(n, comm.rank(), comm.size(), o.shards), total, filled, sums);
  } else {
    without_shards();
  }
  shard_bn_.finish(filled);
  {
    trace::Region region("kdp::train::exact_sum", "compute");
    try {
      exact_.reduce(o.shards, m.last_of_step);
    } catch (const NumericalError& err) {
      throw NumericalError(fmt::format(
          "{} at step {} (epoch {}, batch {}); training stopped before the optimizer step",
          err.what(), m.step + 1, m.epoch + 1, m.index));
    }
  }
  return o.detect_anomaly ? step_loss : Tensor();
}

// A shard's weight in the step's loss: its share of the global batch's
// `total` samples, over the micro-batches per step.
float ShardedStep::shard_weight(int64_t samples, int64_t total) const {
  return static_cast<float>(static_cast<double>(samples) / static_cast<double>(total) /
                            static_cast<double>(env_.options.accumulate_grad_batches));
}

// Dropout's key of each of a shard's samples: the sample and the step, so
// that a sample's mask is its own at every layout and new at every step.
std::vector<uint64_t> ShardedStep::sample_keys(const MicroBatch& m, const ShardRows& rows) const {
  std::vector<uint64_t> keys;
  const uint64_t step = random::mix64(static_cast<uint64_t>(m.step) + 1);
  for (int64_t k = 0; k < rows.count; ++k) {
    keys.push_back(step + static_cast<uint64_t>(m.batch->indices[rows.first + k * rows.step]));
  }
  return keys;
}

// The shards one after another, each through the model.
class OneByOne final : public ShardedStep {
 public:
  using ShardedStep::ShardedStep;
  std::string name() const override { return "one by one"; }

 private:
  Tensor pass(const MicroBatch& m, const std::vector<ShardRows>& shards, int64_t total, int filled,
              EpochSums& sums) override;
};

Tensor OneByOne::pass(const MicroBatch& m, const std::vector<ShardRows>& shards, int64_t total,
                      int filled, EpochSums& sums) {
  const data::Batch& b = *m.batch;
  const Tensor x = b.features.to(home()), y = b.labels.to(home());
  Tensor step_loss = Tensor::zeros({}, home());
  for (int shard = 0; shard < static_cast<int>(shards.size()); ++shard) {
    const ShardRows& rows = shards[static_cast<size_t>(shard)];
    if (rows.count == 0) continue;
    shard_bn_.before_shard();
    const int64_t s = rows.count;
    const Tensor xs = exact::strided_rows(x, rows.first, rows.step, s);
    const Tensor ys = exact::strided_rows(y, rows.first, rows.step, s);
    env_.in.optimizer.zero_grad();
    Tensor out, loss, weighted;
    {
      autograd::GradModeGuard grad(true);
      trace::Region region("kdp::train::forward", "compute");
      if (shard == 0) env_.test.straggle();
      autocast mixed(env_.precision);
      SampleDraws draws(env_.options.sampler_seed, sample_keys(m, rows));
      out = env_.in.model.forward(xs);
      shard_bn_.after_shard(shard, filled);
      loss = env_.in.loss(out, ys);
      weighted = loss * shard_weight(s, total);
    }
    {
      autograd::GradModeGuard grad(true);
      trace::Region region("kdp::train::backward", "compute");
      weighted.backward();
    }
    {
      trace::Region region("kdp::train::keep_shard", "compute");
      exact_.keep_shard();
    }
    sums.add(loss.detach(), static_cast<float>(s), env_.classes ? out.detach() : Tensor(), ys,
             shard);
    step_loss = step_loss + weighted.detach();
  }
  return step_loss;
}

// With SyncBatchNorm: the shards forward together, each through a copy of the
// model (ShardReplicas) on one of the rank's devices in turn, and back in one
// backward; each copy's gradients are kept as its shard's.
class Together final : public ShardedStep {
 public:
  Together(const StepEnv& env, int blas_threads)
      : ShardedStep(env, blas_threads),
        replicas_(env.bare, env.in.optimizer.parameters(), env.options.shards) {}
  std::string name() const override { return "together"; }

 private:
  Tensor pass(const MicroBatch& m, const std::vector<ShardRows>& shards, int64_t total, int filled,
              EpochSums& sums) override;
  // make_shard_step makes every rank hold shards in every batch.
  void without_shards() const override {
    KDP_CHECK(false, StateError,
              "reproducible mode with SyncBatchNorm: rank {} holds no shard of a batch",
              env_.comm.rank());
  }
  exact::ShardReplicas replicas_;
};

Tensor Together::pass(const MicroBatch& m, const std::vector<ShardRows>& shards, int64_t total,
                      int /*filled*/, EpochSums& sums) {
  const data::Batch& b = *m.batch;
  const std::vector<Device>& mine = env_.options.devices;
  const Tensor x = b.features.to(home()), y = b.labels.to(home());
  std::vector<Tensor> xs, ys;
  std::vector<std::vector<uint64_t>> keys;
  std::vector<Device> devices;
  std::vector<int> ids;  // the shards' numbers
  for (const ShardRows& rows : shards) {
    if (rows.count == 0) continue;
    ids.push_back(rows.shard);
    devices.push_back(mine[xs.size() % mine.size()]);
    xs.push_back(exact::strided_rows(x, rows.first, rows.step, rows.count));
    ys.push_back(exact::strided_rows(y, rows.first, rows.step, rows.count).to(devices.back()));
    keys.push_back(sample_keys(m, rows));
  }
  Tensor step_loss = Tensor::zeros({}, home()), sum;
  std::vector<Tensor> outs, losses;
  {
    autograd::GradModeGuard grad(true);
    trace::Region region("kdp::train::forward", "compute");
    env_.test.straggle();
    autocast mixed(env_.precision);
    outs = replicas_.forward(xs, keys, env_.options.sampler_seed, devices);
    for (size_t i = 0; i < outs.size(); ++i) {
      losses.push_back(env_.in.loss(outs[i], ys[i]));
      const Tensor weighted = (losses.back() * shard_weight(xs[i].size(0), total)).to(home());
      sum = sum.defined() ? sum + weighted : weighted;
      step_loss = step_loss + weighted.detach();
    }
  }
  {
    autograd::GradModeGuard grad(true);
    trace::Region region("kdp::train::backward", "compute");
    sum.backward();
  }
  {
    trace::Region region("kdp::train::keep_shard", "compute");
    for (size_t i = 0; i < outs.size(); ++i) exact_.keep_shard(replicas_.gradients(i));
    replicas_.keep_buffers();
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    sums.add(losses[i].detach().to(home()), static_cast<float>(xs[i].size(0)),
             env_.classes ? outs[i].detach().to(home()) : Tensor(), ys[i].to(home()), ids[i]);
  }
  return step_loss;
}

// The rank's shards in one pass (shard_pass.hpp): their rows shard after shard
// through the model at once, each shard's loss on its own rows (weighted as
// one by one), one backward whose linear layers hand each shard's products to
// the exact sum.
class OnePass final : public ShardedStep {
 public:
  OnePass(const StepEnv& env, int blas_threads, std::map<const TensorImpl*, size_t> parameters)
      : ShardedStep(env, blas_threads), parameters_(std::move(parameters)) {
    exact_.use_one_pass();  // on a rank without rows as well
  }
  std::string name() const override { return "one pass"; }

 private:
  Tensor pass(const MicroBatch& m, const std::vector<ShardRows>& shards, int64_t total, int filled,
              EpochSums& sums) override;
  std::map<const TensorImpl*, size_t> parameters_;  // each one's place in the optimizer's list
};

Tensor OnePass::pass(const MicroBatch& m, const std::vector<ShardRows>& shards, int64_t total,
                     int /*filled*/, EpochSums& sums) {
  const data::Batch& b = *m.batch;
  const Tensor x = b.features.to(home()), y = b.labels.to(home());
  std::vector<Tensor> xs, ys;
  std::vector<uint64_t> keys;
  std::vector<int64_t> starts{0};
  std::vector<int> ids;  // the shards' numbers
  for (const ShardRows& rows : shards) {
    if (rows.count == 0) continue;
    ids.push_back(rows.shard);
    xs.push_back(exact::strided_rows(x, rows.first, rows.step, rows.count));
    ys.push_back(exact::strided_rows(y, rows.first, rows.step, rows.count));
    const std::vector<uint64_t> k = sample_keys(m, rows);
    keys.insert(keys.end(), k.begin(), k.end());
    starts.push_back(starts.back() + rows.count);
  }
  const int count = static_cast<int>(xs.size());
  exact::ShardSlots slots(starts, ids, exact_, parameters_);
  Tensor out, sum, step_loss = Tensor::zeros({}, home());
  std::vector<Tensor> losses;
  {
    autograd::GradModeGuard grad(true);
    trace::Region region("kdp::train::forward", "compute");
    env_.test.straggle();
    autocast mixed(env_.precision);
    SampleDraws draws(env_.options.sampler_seed, keys);
    out = env_.in.model.forward(xs.size() == 1 ? xs.front() : cat(xs, 0));
    for (int t = 0; t < count; ++t) {
      const auto i = static_cast<size_t>(t);
      losses.push_back(env_.in.loss(out.slice(0, starts[i], starts[i + 1]), ys[i]));
      const Tensor weighted = losses.back() * shard_weight(xs[i].size(0), total);
      sum = sum.defined() ? sum + weighted : weighted;
      step_loss = step_loss + weighted.detach();
    }
  }
  {
    autograd::GradModeGuard grad(true);
    trace::Region region("kdp::train::backward", "compute");
    sum.backward();
  }
  KDP_CHECK(slots.all_written(), StateError,
            "reproducible mode: a parameter of the model got no gradient from its shards' pass");
  for (int t = 0; t < count; ++t) {
    const auto i = static_cast<size_t>(t);
    const Tensor o = out.detach().slice(0, starts[i], starts[i + 1]);
    sums.add(losses[i].detach(), static_cast<float>(xs[i].size(0)), env_.classes ? o : Tensor(),
             ys[i], ids[i]);
  }
  return step_loss;
}

// What reproducible mode cannot give the same bits at every layout, refused
// before training.
void check_reproducible(const StepEnv& env) {
  const TrainerOptions& o = env.options;
  const int ranks = env.comm.size();
  KDP_CHECK(o.shards >= 1 && o.shards % ranks == 0, ValueError,
            "reproducible mode cuts each batch into {} shards, which {} ranks cannot share "
            "evenly: use a rank count that divides it",
            o.shards, ranks);
  KDP_CHECK(env.exchange == nullptr && env.in.model.wrapped() == nullptr, ValueError,
            "reproducible mode reduces the gradients itself: pass the bare model, not {}",
            env.in.model.type_name());
  // Shards are positions in DistributedSampler's order: rank r holds r, r + R, ...
  const auto* sampler =
      dynamic_cast<const data::DistributedSampler*>(&env.in.train_loader.sampler());
  KDP_CHECK(ranks == 1 || (sampler != nullptr && sampler->options().exact), ValueError,
            "reproducible mode at {} ranks needs the training loader's sampler to be a "
            "DistributedSampler in exact mode (every sample once, in an order that does not "
            "depend on the rank count)",
            ranks);
  const std::string batch_norm = exact::batch_norm_refusal(env.bare);
  KDP_CHECK(batch_norm.empty(), ValueError, "reproducible mode cannot keep a BatchNorm layer: {}",
            batch_norm);
}

// BatchNorm cannot normalise a shard of one sample (in training, as in
// PyTorch): every batch of the epoch, the last one included, must fill each
// shard with two or more. SyncBatchNorm's shards meet on every rank: each
// needs one or more.
void check_shard_sizes(const StepEnv& env, const EpochLayout& layout, bool synchronised) {
  const int shards = env.options.shards;
  const int64_t batch = layout.global_batch;
  const int64_t last = layout.samples % batch == 0 ? batch : layout.samples % batch;
  const int64_t each = synchronised ? 1 : exact::batch_norms(env.bare).empty() ? 0 : 2;
  KDP_CHECK(std::min(batch, last) >= each * shards, ValueError,
            "with {} layers, reproducible mode needs every batch to give each of its {} shards "
            "{} or more, and the epoch's {} samples in batches of {} end with a batch of {}: "
            "use a global batch whose last one holds {} or more (or none)",
            synchronised ? "SyncBatchNorm" : "BatchNorm", shards,
            each == 1 ? "a sample" : "two samples", layout.samples, batch, last, each * shards);
}

}  // namespace

// With SyncBatchNorm, which must meet every shard, shards go forward together;
// a model that keeps a batch's rows apart goes in one pass (in fp32, in host
// memory); any other one by one.
std::unique_ptr<StepStrategy> make_shard_step(const StepEnv& env, const EpochLayout& layout) {
  check_reproducible(env);
  const bool synchronised = synchronizes_replicas(env.bare);
  check_shard_sizes(env, layout, synchronised);
  const int threads = blas_threads();
  if (synchronised) return std::make_unique<Together>(env, threads);
  if (exact::one_pass_precision(env.precision, env.comm)) {
    // A batch's features are [rows, the dataset's sample shape].
    const int dims = env.in.train_loader.dataset().sample_shape().rank() + 1;
    auto parameters = exact::one_pass_parameters(env.bare, env.in.optimizer.parameters(), dims);
    if (!parameters.empty()) return std::make_unique<OnePass>(env, threads, std::move(parameters));
  }
  return std::make_unique<OneByOne>(env, threads);
}

}  // namespace kdp::train::detail
