#include "shard_replicas.hpp"

#include "core/check.hpp"
#include "kdp/nn/batch_norm.hpp"
#include "kdp/ops/activation.hpp"
#include "kdp/parallel/parallel_apply.hpp"

namespace kdp::train::detail {

namespace {

// One shard's copy of the model, drawing its dropout masks per sample.
class ShardCopy : public nn::Module {
 public:
  ShardCopy(std::shared_ptr<nn::Module> copy, uint64_t seed, std::vector<uint64_t> keys)
      : Module("ShardCopy"),
        copy_(register_module("copy", std::move(copy))),
        seed_(seed),
        keys_(std::move(keys)) {}
  Tensor forward(const Tensor& x) override {
    SampleDraws draws(seed_, keys_);
    return (*copy_)(x);
  }
  using Module::forward;

 private:
  std::shared_ptr<nn::Module> copy_;
  uint64_t seed_;
  std::vector<uint64_t> keys_;
};

template <class F>
void for_each_synchronizer(nn::Module& m, const F& f) {
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m); bn != nullptr && bn->synchronizer()) {
    f(*bn->synchronizer());
  }
  for (const auto& [name, child] : m.named_children()) for_each_synchronizer(*child, f);
}

}  // namespace

bool ShardReplicas::needed(const nn::Module& model) {
  for (const auto& [name, m] : model.named_modules()) {
    if (m->synchronizes_replicas()) return true;
  }
  return false;
}

ShardReplicas::ShardReplicas(nn::Module& model, const optim::NamedParameters& params, int shards)
    : model_(model) {
  const nn::NamedTensors own = model.named_parameters();
  for (const auto& [name, p] : params) {
    size_t place = 0;
    while (place < own.size() && !own[place].second.is_same(p)) ++place;
    KDP_CHECK(place < own.size(), ValueError,
              "reproducible mode with SyncBatchNorm: the optimizer's parameter '{}' is not one "
              "of the model's",
              name);
    places_.push_back(place);
  }
  for_each_synchronizer(model_, [&](nn::BatchNormSynchronizer& s) {
    KDP_CHECK(s.sum_exactly(shards), ValueError,
              "reproducible mode: a synchronised BatchNorm layer's synchronizer cannot sum "
              "exactly (only kdp's SyncBatchNorm can)");
  });
}

ShardReplicas::~ShardReplicas() {
  for_each_synchronizer(model_, [](nn::BatchNormSynchronizer& s) { s.sum_exactly(0); });
}

std::vector<Tensor> ShardReplicas::forward(const std::vector<Tensor>& xs,
                                           const std::vector<std::vector<uint64_t>>& keys,
                                           uint64_t seed, const Device& device) {
  copies_.clear();
  std::vector<std::shared_ptr<nn::Module>> replicas;
  for (size_t i = 0; i < xs.size(); ++i) {
    copies_.push_back(model_.clone());
    replicas.push_back(std::make_shared<ShardCopy>(copies_.back(), seed, keys[i]));
  }
  return parallel_apply(replicas, xs, std::vector<Device>(xs.size(), device));
}

std::vector<Tensor> ShardReplicas::gradients(size_t shard) const {
  const nn::NamedTensors own = copies_.at(shard)->named_parameters();
  std::vector<Tensor> grads;
  for (size_t place : places_) grads.push_back(own[place].second.grad());
  return grads;
}

void ShardReplicas::keep_buffers() {
  if (copies_.empty()) return;
  const nn::NamedTensors from = copies_.front()->named_buffers();
  nn::NamedTensors to = model_.named_buffers();
  for (size_t i = 0; i < to.size(); ++i) to[i].second.copy_(from[i].second);
}

}  // namespace kdp::train::detail
