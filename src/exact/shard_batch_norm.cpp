#include "exact/shard_batch_norm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "dist/algorithms/exact_sum.hpp"
#include "kdp/core/error.hpp"

namespace kdp::exact {

namespace {

void batch_norms(nn::Module& m, const std::string& name,
                 std::vector<std::pair<std::string, nn::BatchNorm*>>& out) {
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m)) out.emplace_back(name, bn);
  for (const auto& [child, c] : m.named_children()) {
    batch_norms(*c, name.empty() ? child : name + "." + child, out);
  }
}

void write(const Tensor& target, const std::vector<float>& values) {
  Tensor t = target;  // the buffer's storage
  t.copy_(Tensor::from_host(values, t.shape(), t.device()));
}

}  // namespace

std::vector<std::pair<std::string, nn::BatchNorm*>> batch_norms(nn::Module& model) {
  std::vector<std::pair<std::string, nn::BatchNorm*>> out;
  batch_norms(model, "", out);
  return out;
}

std::string batch_norm_refusal(nn::Module& model) {
  const std::string* synchronised = nullptr;
  const std::string* plain = nullptr;
  for (const auto& [name, bn] : batch_norms(model)) {
    (bn->synchronizes_replicas() ? synchronised : plain) = &name;
    if (synchronised != nullptr && plain != nullptr) {
      return fmt::format(
          "'{}' is synchronised (SyncBatchNorm) and '{}' is not: reproducible mode takes a "
          "model whose BatchNorm layers are all synchronised or none",
          *synchronised, *plain);
    }
    if (!bn->synchronizes_replicas() && bn->options().track_running_stats &&
        !bn->options().momentum) {
      return fmt::format("'{}' keeps a cumulative average (momentum none): give it a momentum",
                         name);
    }
  }
  return "";
}

ShardBatchNorm::ShardBatchNorm(nn::Module& model, dist::Communicator& comm) : comm_(comm) {
  for (const auto& [name, bn] : batch_norms(model)) {
    if (bn->options().track_running_stats && !bn->synchronizes_replicas()) {
      layers_.push_back({bn, *bn->options().momentum, {}, {}, 0.0f, {}});
    }
  }
}

void ShardBatchNorm::begin() {
  for (Layer& l : layers_) {
    l.mean0 = l.layer->running_mean().to_vector();
    l.var0 = l.layer->running_var().to_vector();
    l.count0 = l.layer->num_batches_tracked().to_vector().front();
    l.terms.clear();
  }
}

void ShardBatchNorm::before_shard() {
  for (Layer& l : layers_) {
    write(l.layer->running_mean(), l.mean0);
    write(l.layer->running_var(), l.var0);
  }
}

void ShardBatchNorm::after_shard(int shard, int shards) {
  for (Layer& l : layers_) {
    // a = (1 - m) r0 + m stat, so m stat = a - (1 - m) r0, carried forward
    // over the shards after this one.
    const double keep = 1.0 - l.momentum;
    const double carry = std::pow(keep, shards - 1 - shard);
    for (const auto& [after, start] : {std::pair{l.layer->running_mean().to_vector(), &l.mean0},
                                       std::pair{l.layer->running_var().to_vector(), &l.var0}}) {
      for (size_t c = 0; c < after.size(); ++c) {
        l.terms.push_back(carry * (after[c] - keep * static_cast<double>((*start)[c])));
      }
    }
  }
}

void ShardBatchNorm::finish(int shards) {
  for (Layer& l : layers_) {
    const size_t n = 2 * l.mean0.size();
    std::vector<std::vector<double>> parts;
    for (size_t k = 0; k < l.terms.size(); k += n) {
      parts.emplace_back(l.terms.begin() + static_cast<long>(k),
                         l.terms.begin() + static_cast<long>(k + n));
    }
    const std::vector<double> sum = dist::detail::exact_sum(comm_, parts, n, shards);
    const double decay = std::pow(1.0 - l.momentum, shards);
    std::vector<float> mean(l.mean0.size()), var(l.var0.size());
    for (size_t c = 0; c < mean.size(); ++c) {
      mean[c] = static_cast<float>(decay * l.mean0[c] + sum[c]);
      var[c] = static_cast<float>(decay * l.var0[c] + sum[mean.size() + c]);
    }
    write(l.layer->running_mean(), mean);
    write(l.layer->running_var(), var);
    write(l.layer->num_batches_tracked(), {l.count0 + static_cast<float>(shards)});
  }
}

}  // namespace kdp::exact
