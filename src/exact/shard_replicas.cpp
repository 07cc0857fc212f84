#include "exact/shard_replicas.hpp"

#include "core/check.hpp"
#include "kdp/nn/batch_norm.hpp"
#include "kdp/ops/activation.hpp"
#include "kdp/parallel/parallel_apply.hpp"

namespace kdp::exact {

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
  // The copy of a user's module runs the original's layers with the copy's
  // tensors bound in (nn::BoundModule), so its own tree does not show the
  // synchronised layers: the shards must meet all the same.
  bool synchronizes_replicas() const override { return true; }

 private:
  std::shared_ptr<nn::Module> copy_;
  uint64_t seed_;
  std::vector<uint64_t> keys_;
};

// The synchronizers of the model's synchronised layers, in model order;
// refuses a layer that meets the other replicas but is not a BatchNorm.
std::vector<nn::BatchNormSynchronizer*> synchronizers(const nn::Module& model) {
  std::vector<nn::BatchNormSynchronizer*> out;
  for (const auto& [name, m] : model.named_modules()) {
    if (!m->synchronizes_replicas()) continue;
    const auto* bn = dynamic_cast<const nn::BatchNorm*>(m.get());
    KDP_CHECK(bn != nullptr, ValueError,
              "reproducible mode: '{}' ({}) meets the other replicas in its forward, and only "
              "a synchronised BatchNorm's sums can be made exact",
              name, m->type_name());
    out.push_back(bn->synchronizer().get());
  }
  return out;
}

}  // namespace

ShardReplicas::ShardReplicas(nn::Module& model, const optim::NamedParameters& params, int shards)
    : model_(model) {
  // Every module's own parameters, a tensor two modules share under both
  // names (named_parameters() lists it once): a copy would give a tensor used
  // twice (tied weights) two leaves.
  nn::NamedTensors own;
  for (const auto& [prefix, m] : model.named_modules()) {
    for (const auto& [name, p] : m->named_parameters(false)) {
      own.emplace_back(prefix.empty() ? name : prefix + "." + name, p);
    }
  }
  for (size_t i = 0; i < own.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      KDP_CHECK(!own[i].second.is_same(own[j].second), ValueError,
                "reproducible mode with SyncBatchNorm: '{}' and '{}' are one tensor (tied "
                "parameters), which the shards' copies of the model cannot share",
                own[j].first, own[i].first);
    }
  }
  for (const auto& [name, p] : params) {
    size_t place = 0;
    while (place < own.size() && !own[place].second.is_same(p)) ++place;
    KDP_CHECK(place < own.size(), ValueError,
              "reproducible mode with SyncBatchNorm: the optimizer's parameter '{}' is not one "
              "of the model's",
              name);
    places_.push_back(place);
  }
  synchronizers_ = synchronizers(model_);
  for (nn::BatchNormSynchronizer* s : synchronizers_) {
    if (!s->sum_exactly(shards)) {
      for (nn::BatchNormSynchronizer* accepted : synchronizers_) accepted->sum_exactly(0);
      KDP_FAIL(ValueError,
               "reproducible mode: a synchronised BatchNorm layer's synchronizer cannot sum "
               "exactly (only kdp's SyncBatchNorm can)");
    }
  }
}

ShardReplicas::~ShardReplicas() {
  for (nn::BatchNormSynchronizer* s : synchronizers_) s->sum_exactly(0);
}

// Copy i of the model on `device`, made once and then brought up to date:
// its parameters view the model's memory (nothing is copied; the gradients
// are its own, dropped here), its buffers take the model's values.
nn::Module& ShardReplicas::copy_on(size_t i, const Device& device) {
  if (i >= copies_.size()) {
    copies_.push_back(model_.clone());
    if (!(device == model_.device())) copies_.back()->to(device);
  }
  nn::Module& copy = *copies_[i];
  KDP_CHECK(copy.device() == device, StateError, "a shard's copy of the model is on {}, not {}",
            copy.device().str(), device.str());
  const nn::NamedTensors from = model_.named_parameters(), to = copy.named_parameters();
  for (size_t k = 0; k < to.size(); ++k) {
    Tensor p = to[k].second;
    p.set_data(from[k].second.detach().to(device));
  }
  copy.zero_grad();
  const nn::NamedTensors values = model_.named_buffers(), buffers = copy.named_buffers();
  for (size_t k = 0; k < buffers.size(); ++k) {
    Tensor b = buffers[k].second;
    b.copy_(values[k].second.to(device));
  }
  return copy;
}

std::vector<Tensor> ShardReplicas::forward(const std::vector<Tensor>& xs,
                                           const std::vector<std::vector<uint64_t>>& keys,
                                           uint64_t seed, const std::vector<Device>& devices) {
  std::vector<std::shared_ptr<nn::Module>> replicas;
  std::vector<Tensor> inputs;
  used_ = xs.size();
  for (size_t i = 0; i < xs.size(); ++i) {
    copy_on(i, devices[i]);
    replicas.push_back(std::make_shared<ShardCopy>(copies_[i], seed, keys[i]));
    inputs.push_back(xs[i].to(devices[i]));
  }
  return parallel_apply(replicas, inputs, devices);
}

std::vector<Tensor> ShardReplicas::gradients(size_t shard) const {
  const nn::NamedTensors own = copies_.at(shard)->named_parameters();
  copies_[shard]->device().fence("kdp::reproducible shard gradients");
  std::vector<Tensor> grads;
  for (size_t place : places_) grads.push_back(own[place].second.grad());
  return grads;
}

void ShardReplicas::keep_buffers() {
  if (used_ == 0) return;
  const nn::NamedTensors from = copies_.front()->named_buffers();
  nn::NamedTensors to = model_.named_buffers();
  for (size_t i = 0; i < to.size(); ++i) to[i].second.copy_(from[i].second);
}

}  // namespace kdp::exact
