// FitRun's independence of the layout: the epoch every rank agrees on, the
// share of an unevenly cut last batch (and the stand-in batch of a rank with
// none), and reproducible mode's shards, summed exactly.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/check.hpp"
#include "exact/shard_pass.hpp"
#include "fit_run.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/generator.hpp"
#include "kdp/core/precision.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/data/distributed_sampler.hpp"
#include "kdp/ops/activation.hpp"
#include "kdp/ops/elementwise.hpp"
#include "kdp/parallel/parallel_apply.hpp"

namespace kdp::train::detail {

// The epoch every rank steps through: as many batches as the rank with the
// most (a sampler that gives every sample once, as DistributedSampler's exact
// mode, may leave a rank without a share of the last batch: it takes part
// with none, see train_epoch), and the global batch that a checkpoint's
// position is counted in. KDP_TEST_SAMPLE_LOG names a file to which each rank
// appends the epoch, step and index of every sample it trains on (for tests
// that count them).
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
  const int64_t fewest = -most[1], batch = sums[0];
  KDP_CHECK(fewest > 0 || most[0] == 0, ValueError,
            "a rank's sampler gives it no training sample per epoch (rank {}'s gives {}, {} "
            "ranks in all): give every rank a share, or use fewer ranks",
            comm_.rank(), samples, comm_.size());
  batches_ = most[0];
  global_batch_ = batch;
  if (o_.reproducible) {
    check_reproducible();
    // A multi-threaded BLAS (or oneDNN, which takes the BLAS's count) may
    // split a product's sums by its thread count: one thread gives every
    // layout the same bits, whatever threads a rank has. The one pass's own
    // products (row_gemm) keep the rank's threads: their bits do not depend
    // on the split.
    const int threads = blas_threads();
    one_blas_thread_.emplace(1);
    exact_ = std::make_unique<ExactGradient>(in_.optimizer.parameters(), comm_, o_.devices.front(),
                                             threads);
    shard_bn_ = std::make_unique<ShardBatchNorm>(bare_, comm_);
    // With SyncBatchNorm, which must meet every shard, shards go forward
    // together.
    synchronised_ = synchronizes_replicas(bare_);
    if (synchronised_) {
      replicas_ = std::make_unique<ShardReplicas>(bare_, in_.optimizer.parameters(), o_.shards);
    }
    // BatchNorm cannot normalise a shard of one sample (in training, as in
    // PyTorch): every batch of the epoch, the last one included, must fill
    // each shard with two or more. SyncBatchNorm's shards meet on every rank:
    // each needs one or more.
    const int64_t last = sums[1] % batch == 0 ? batch : sums[1] % batch;
    const int64_t each = synchronised_ ? 1 : shard_bn_->empty() ? 0 : 2;
    KDP_CHECK(std::min(batch, last) >= each * o_.shards, ValueError,
              "with {} layers, reproducible mode needs every batch to give each of its {} shards "
              "{} or more, and the epoch's {} samples in batches of {} end with a batch of {}: "
              "use a global batch whose last one holds {} or more (or none)",
              synchronised_ ? "SyncBatchNorm" : "BatchNorm", o_.shards,
              each == 1 ? "a sample" : "two samples", sums[1], batch, last, each * o_.shards);
  }
  if (const char* log = std::getenv("KDP_TEST_SAMPLE_LOG")) {
    sample_log_ = fmt::format("{}.{}.{}", log, comm_.rank(), ::getpid());
  }
}

void FitRun::log_samples(const Epoch& e, const data::Batch& b) const {
  if (sample_log_.empty()) return;
  std::string lines;
  for (int64_t i : b.indices) lines += fmt::format("{} {} {}\n", e.index, global_step_ + 1, i);
  if (FILE* f = std::fopen(sample_log_.c_str(), "a")) {
    std::fputs(lines.c_str(), f);
    std::fclose(f);
  }
}

// What reproducible mode cannot give the same bits at every layout, refused
// before training.
void FitRun::check_reproducible() const {
  KDP_CHECK(o_.shards >= 1 && o_.shards % comm_.size() == 0, ValueError,
            "reproducible mode cuts each batch into {} shards, which {} ranks cannot share "
            "evenly: use a rank count that divides it",
            o_.shards, comm_.size());
  KDP_CHECK(exchange_ == nullptr && in_.model.wrapped() == nullptr, ValueError,
            "reproducible mode reduces the gradients itself: pass the bare model, not {}",
            in_.model.type_name());
  // Shards are positions in DistributedSampler's order: rank r holds r, r + R, ...
  const auto* sampler = dynamic_cast<const data::DistributedSampler*>(&in_.train_loader.sampler());
  KDP_CHECK(comm_.size() == 1 || (sampler != nullptr && sampler->options().exact), ValueError,
            "reproducible mode at {} ranks needs the training loader's sampler to be a "
            "DistributedSampler in exact mode (every sample once, in an order that does not "
            "depend on the rank count)",
            comm_.size());
  const std::string batch_norm = batch_norm_refusal(bare_);
  KDP_CHECK(batch_norm.empty(), ValueError, "reproducible mode cannot keep a BatchNorm layer: {}",
            batch_norm);
}

// Reproducible mode's micro-batch: each of the batch's shards on this rank
// forward and backward on its own (loss weighted by its share of the global
// batch, and by 1 / the micro-batches per step as without this mode), then the
// exact sum over every rank's shards, added to the step's earlier
// micro-batches' in their order.
void FitRun::train_shards(Epoch& e, const data::Batch* b, bool last_micro) {
  const int64_t n = b != nullptr ? b->features.size(0) : 0;
  int64_t total = n;
  comm_.allreduce(&total, 1, dist::ReduceOp::Sum);
  NoGradGuard outside;
  Tensor step_loss = Tensor::zeros({}, o_.devices.front());
  // The shards with samples, over every rank: 0 .. min(shards, total) - 1.
  const int filled = static_cast<int>(std::min<int64_t>(o_.shards, total));
  shard_bn_->begin();
  if (b != nullptr && n > 0) {
    const std::vector<ShardRows> shards = shard_rows(n, comm_.rank(), comm_.size(), o_.shards);
    step_loss = replicas_            ? shards_together(e, *b, shards, total)
                : takes_one_pass(*b) ? shards_in_one_pass(e, *b, shards, total)
                                     : shards_one_by_one(e, *b, shards, total, filled);
  } else {
    // With SyncBatchNorm, agree_on_epoch makes every rank hold shards in
    // every batch.
    KDP_CHECK(!synchronised_, StateError,
              "reproducible mode with SyncBatchNorm: rank {} holds no shard of a batch",
              comm_.rank());
  }
  shard_bn_->finish(filled);
  {
    trace::Region region("kdp::train::exact_sum", "compute");
    try {
      exact_->reduce(o_.shards, last_micro);
    } catch (const NumericalError& err) {
      throw NumericalError(fmt::format(
          "{} at step {} (epoch {}, batch {}); training stopped before the optimizer step",
          err.what(), global_step_ + 1, e.index + 1, e.batch));
    }
  }
  if (o_.detect_anomaly) e.step_loss = e.step_loss.defined() ? e.step_loss + step_loss : step_loss;
  ++e.batch;
  if (b == nullptr) return;
  last_batch_ = *b;
  e.samples += n;
  log_samples(e, *b);
}

// The shards one after another, each through the model; returns the sum of
// their weighted losses.
Tensor FitRun::shards_one_by_one(Epoch& e, const data::Batch& b,
                                 const std::vector<ShardRows>& shards, int64_t total, int filled) {
  const Tensor x = b.features.to(o_.devices.front()), y = b.labels.to(o_.devices.front());
  Tensor step_loss = Tensor::zeros({}, o_.devices.front());
  for (int shard = 0; shard < static_cast<int>(shards.size()); ++shard) {
    const ShardRows& rows = shards[static_cast<size_t>(shard)];
    if (rows.count == 0) continue;
    shard_bn_->before_shard();
    const int64_t s = rows.count;
    const Tensor xs = strided_rows(x, rows.first, rows.step, s);
    const Tensor ys = strided_rows(y, rows.first, rows.step, s);
    in_.optimizer.zero_grad();
    Tensor out, loss, weighted;
    {
      autograd::GradModeGuard grad(true);
      trace::Region region("kdp::train::forward", "compute");
      if (shard == 0) straggle();
      autocast mixed(result_.precision);
      SampleDraws draws(o_.sampler_seed, sample_keys(b, rows));
      out = in_.model.forward(xs);
      shard_bn_->after_shard(shard, filled);
      loss = in_.loss(out, ys);
      weighted = loss * shard_weight(s, total);
    }
    {
      autograd::GradModeGuard grad(true);
      trace::Region region("kdp::train::backward", "compute");
      weighted.backward();
    }
    {
      trace::Region region("kdp::train::keep_shard", "compute");
      exact_->keep_shard();
    }
    e.running.add(loss.detach(), static_cast<float>(s), classes_ ? out.detach() : Tensor(), ys,
                  shard);
    step_loss = step_loss + weighted.detach();
  }
  return step_loss;
}

// With SyncBatchNorm: the shards forward together, each through a copy of the
// model (ShardReplicas) on one of the rank's devices in turn, and back in one
// backward; each copy's gradients are kept as its shard's. Returns the sum of
// their weighted losses.
Tensor FitRun::shards_together(Epoch& e, const data::Batch& b, const std::vector<ShardRows>& shards,
                               int64_t total) {
  const Device& home = o_.devices.front();
  const Tensor x = b.features.to(home), y = b.labels.to(home);
  std::vector<Tensor> xs, ys;
  std::vector<std::vector<uint64_t>> keys;
  std::vector<Device> devices;
  std::vector<int> ids;  // the shards' numbers
  for (const ShardRows& rows : shards) {
    if (rows.count == 0) continue;
    ids.push_back(rows.shard);
    devices.push_back(o_.devices[xs.size() % o_.devices.size()]);
    xs.push_back(strided_rows(x, rows.first, rows.step, rows.count));
    ys.push_back(strided_rows(y, rows.first, rows.step, rows.count).to(devices.back()));
    keys.push_back(sample_keys(b, rows));
  }
  Tensor step_loss = Tensor::zeros({}, home), sum;
  std::vector<Tensor> outs, losses;
  {
    autograd::GradModeGuard grad(true);
    trace::Region region("kdp::train::forward", "compute");
    straggle();
    autocast mixed(result_.precision);
    outs = replicas_->forward(xs, keys, o_.sampler_seed, devices);
    for (size_t i = 0; i < outs.size(); ++i) {
      losses.push_back(in_.loss(outs[i], ys[i]));
      const Tensor weighted = (losses.back() * shard_weight(xs[i].size(0), total)).to(home);
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
    for (size_t i = 0; i < outs.size(); ++i) exact_->keep_shard(replicas_->gradients(i));
    replicas_->keep_buffers();
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    e.running.add(losses[i].detach().to(home), static_cast<float>(xs[i].size(0)),
                  classes_ ? outs[i].detach().to(home) : Tensor(), ys[i].to(home), ids[i]);
  }
  return step_loss;
}

// Whether the shards can go in one pass (shard_pass.hpp): host memory, fp32
// products, a model that keeps a batch's rows apart; the same answer at every
// layout.
bool FitRun::takes_one_pass(const data::Batch& b) {
  if (!one_pass_precision(result_.precision)) return false;
  const int dims = b.features.dim();
  if (dims != one_pass_dims_) {
    one_pass_ = one_pass_parameters(bare_, in_.optimizer.parameters(), dims);
    one_pass_dims_ = dims;
  }
  return !one_pass_.empty();
}

// The rank's shards in one pass: their rows shard after shard through the
// model at once, each shard's loss on its own rows (weighted as in
// shards_one_by_one), one backward whose linear layers hand each shard's
// products to the exact sum. Returns the sum of the weighted losses.
Tensor FitRun::shards_in_one_pass(Epoch& e, const data::Batch& b,
                                  const std::vector<ShardRows>& shards, int64_t total) {
  const Device& home = o_.devices.front();
  const Tensor x = b.features.to(home), y = b.labels.to(home);
  std::vector<Tensor> xs, ys;
  std::vector<uint64_t> keys;
  std::vector<int64_t> starts{0};
  std::vector<int> ids;  // the shards' numbers
  for (const ShardRows& rows : shards) {
    if (rows.count == 0) continue;
    ids.push_back(rows.shard);
    xs.push_back(strided_rows(x, rows.first, rows.step, rows.count));
    ys.push_back(strided_rows(y, rows.first, rows.step, rows.count));
    const std::vector<uint64_t> k = sample_keys(b, rows);
    keys.insert(keys.end(), k.begin(), k.end());
    starts.push_back(starts.back() + rows.count);
  }
  const int count = static_cast<int>(xs.size());
  ShardSlots slots(starts, *exact_, one_pass_);
  Tensor out, sum, step_loss = Tensor::zeros({}, home);
  std::vector<Tensor> losses;
  {
    autograd::GradModeGuard grad(true);
    trace::Region region("kdp::train::forward", "compute");
    straggle();
    SampleDraws draws(o_.sampler_seed, keys);
    out = in_.model.forward(xs.size() == 1 ? xs.front() : cat(xs, 0));
    for (int t = 0; t < count; ++t) {
      const auto i = static_cast<size_t>(t);
      losses.push_back(in_.loss(out.slice(0, starts[i], starts[i + 1]), ys[i]));
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
    e.running.add(losses[i].detach(), static_cast<float>(xs[i].size(0)), classes_ ? o : Tensor(),
                  ys[i], ids[i]);
  }
  return step_loss;
}

// A shard's weight in the step's loss: its share of the global batch's
// `total` samples, over the micro-batches per step.
float FitRun::shard_weight(int64_t samples, int64_t total) const {
  return static_cast<float>(static_cast<double>(samples) / static_cast<double>(total) /
                            static_cast<double>(o_.accumulate_grad_batches));
}

// Dropout's key of each of a shard's samples: the sample and the step, so
// that a sample's mask is its own at every layout and new at every step.
std::vector<uint64_t> FitRun::sample_keys(const data::Batch& b, const ShardRows& rows) const {
  std::vector<uint64_t> keys;
  const uint64_t step = random::mix64(static_cast<uint64_t>(global_step_) + 1);
  for (int64_t k = 0; k < rows.count; ++k) {
    keys.push_back(step + static_cast<uint64_t>(b.indices[rows.first + k * rows.step]));
  }
  return keys;
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

// This rank's weight in the mean over a batch whose `samples` here are part of
// one batch over all ranks: samples x ranks / the batch's samples (1 when
// every rank has the same count).
float FitRun::share_of_last_batch(int64_t samples) {
  if (comm_.size() == 1) return 1.0f;
  int64_t total = samples;
  comm_.allreduce(&total, 1, dist::ReduceOp::Sum);
  if (total == 0) return 0.0f;
  return static_cast<float>(static_cast<double>(samples) * comm_.size() /
                            static_cast<double>(total));
}

}  // namespace kdp::train::detail
