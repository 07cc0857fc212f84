#include "kdp/dist/sync_batch_norm.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "dist/algorithms/exact_sum.hpp"
#include "kdp/autograd/node.hpp"
#include "kdp/core/binding.hpp"
#include "kdp/core/error.hpp"
#include "kdp/parallel/replica_group.hpp"
#include "ops/batch_norm_kernels.hpp"

namespace kdp::dist {

namespace {

namespace bn = ops_detail::bn;

// The sum of the replicas' parts (of one length), then over the ranks: in
// replica order and by MPI, or exact (dist/algorithms/exact_sum.hpp) for `exact_terms`
// parts in all over the ranks.
std::vector<double> sum_over_ranks(Communicator& comm,
                                   const std::vector<std::vector<double>>& parts, int exact_terms) {
  const size_t length = parts.front().size();
  if (exact_terms > 0) return detail::exact_sum(comm, parts, length, exact_terms);
  std::vector<double> total(length, 0.0);
  for (const std::vector<double>& p : parts) {
    for (size_t k = 0; k < length; ++k) total[k] += p[k];
  }
  comm.allreduce(total.data(), length, ReduceOp::Sum);
  return total;
}

// What one replica brings to the forward's reduction.
struct ReplicaPart {
  std::vector<double> sums;  // Σx per channel, Σx² per channel, the count
  Tensor x, weight, bias;
};

// The backward of one synchronised layer for all the replicas of a forward:
// output i is replica i's, its edges are (x, weight, bias) of each replica in
// turn. It runs once, when every replica's gradient has arrived, reduces
// Σdy and Σdy x̂ over the replicas and the ranks in one collective, and gives
// each replica its input's gradient; the weight and bias get each replica's
// own sums, which DataParallel and DDP add up and average as for any layer.
class SyncBatchNormNode : public autograd::Node {
 public:
  SyncBatchNormNode(const Device& device, int replicas, Communicator comm, std::vector<double> sums,
                    int64_t channels, double eps, int exact_terms)
      : Node(device, replicas),
        comm_(std::move(comm)),
        sums_(std::move(sums)),
        channels_(channels),
        eps_(eps),
        exact_terms_(exact_terms) {}
  const char* name() const override { return "kdp::SyncBatchNorm"; }

  void keep(const std::vector<ReplicaPart>& parts) {
    for (const ReplicaPart& p : parts) {
      x_.emplace_back(p.x);
      weight_.emplace_back(p.weight);
      devices_.push_back(p.x.device());
    }
  }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Device& dev = device();
    const size_t n = x_.size();
    const int64_t c = channels_;
    // The whole batch's statistics, again, on this node's device.
    Tensor mean = Tensor::empty(Shape{c}, dev), invstd = Tensor::empty(Shape{c}, dev);
    const double count = sums_[static_cast<size_t>(2 * c)];
    bn::DoubleBuffer stats(2 * c, dev);
    stats.from_host(std::vector<double>(sums_.begin(), sums_.begin() + 2 * c));
    bn::statistics(dev, mean.flat(), invstd.flat(), stats.view, count, eps_, View1(), View1(),
                   false, 0.0, c);
    // Each replica's Σdy and Σdy x̂; their sum over replicas and ranks.
    std::vector<Tensor> dy(n), x(n);
    std::vector<std::vector<double>> local(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = x_[i].get(*this).to(dev);
      dy[i] = grads[i].defined() ? grads[i].to(dev) : Tensor::zeros(x[i].shape(), dev);
      const bn::Layout l = bn::layout_of("kdp::SyncBatchNorm", x[i], c);
      bn::DoubleBuffer g(2 * c, dev);
      bn::gradient_sums(dev, g.view, dy[i].cflat(), x[i].cflat(), mean.cflat(), invstd.cflat(), l);
      local[i] = g.to_host();
    }
    const std::vector<double> total = sum_over_ranks(comm_, local, exact_terms_);
    bn::DoubleBuffer gtotal(2 * c, dev);
    gtotal.from_host(total);

    std::vector<Tensor> out;
    for (size_t i = 0; i < n; ++i) {
      const auto& edges = next_edges();
      const bool affine = weight_[i].defined();
      Tensor dx, dw, db;
      if (edges[3 * i].valid()) {
        const bn::Layout l = bn::layout_of("kdp::SyncBatchNorm", x[i], c);
        dx = Tensor::empty(x[i].shape(), dev);
        bn::input_gradient(dev, dx.flat(), dy[i].cflat(), x[i].cflat(), mean.cflat(),
                           invstd.cflat(),
                           affine ? weight_[i].get(*this).to(dev).cflat() : ConstView1(), affine,
                           gtotal.view, count, true, l);
        dx = dx.to(devices_[i]);
      }
      if (affine) {
        std::vector<float> dgamma(static_cast<size_t>(c)), dbeta(static_cast<size_t>(c));
        for (int64_t k = 0; k < c; ++k) {
          dbeta[static_cast<size_t>(k)] = static_cast<float>(local[i][static_cast<size_t>(k)]);
          dgamma[static_cast<size_t>(k)] = static_cast<float>(local[i][static_cast<size_t>(c + k)]);
        }
        if (edges[3 * i + 1].valid()) dw = Tensor::from_host(dgamma, Shape{c}, devices_[i]);
        if (edges[3 * i + 2].valid()) db = Tensor::from_host(dbeta, Shape{c}, devices_[i]);
      }
      out.push_back(dx);
      out.push_back(dw);
      out.push_back(db);
    }
    return out;
  }

  void release_saved() override {
    for (auto& t : x_) t.reset();
    for (auto& t : weight_) t.reset();
  }

 private:
  Communicator comm_;
  std::vector<double> sums_;
  int64_t channels_;
  double eps_;
  int exact_terms_;
  std::vector<autograd::SavedTensor> x_, weight_;
  std::vector<Device> devices_;
};

// What the replicas of a forward agree on: the whole batch's sums (and
// count), and the node that will differentiate all of them.
struct Agreement {
  std::vector<double> sums;
  std::shared_ptr<SyncBatchNormNode> node;
};

class Synchronizer : public nn::BatchNormSynchronizer {
 public:
  explicit Synchronizer(Communicator comm) : comm_(std::move(comm)) {}

  bool sum_exactly(int terms) override {
    exact_terms_ = terms;
    return true;
  }

  Tensor forward(const nn::BatchNorm& layer, const Tensor& input, double momentum) override {
    const char* op = "kdp::SyncBatchNorm";
    const Tensor& x = resolve(input);
    const int64_t c = layer.num_features();
    const bn::Layout l = bn::layout_of(op, x, c);
    const Device& dev = x.device();
    const nn::BatchNormOptions& o = layer.options();

    ReplicaPart part;
    bn::DoubleBuffer sums(2 * c, dev);
    bn::channel_sums(dev, sums.view, x.cflat(), l);
    part.sums = sums.to_host();
    part.sums.push_back(static_cast<double>(l.count()));
    part.x = x;
    part.weight = resolve(layer.weight());
    part.bias = resolve(layer.bias());

    ReplicaGroup* group = ReplicaGroup::current();
    const int index = group != nullptr ? ReplicaGroup::current_index() : 0;
    std::function<Agreement(std::vector<ReplicaPart>&)> combine =
        [&](std::vector<ReplicaPart>& parts) { return agree(parts, c, o.eps); };
    Agreement agreed;
    if (group != nullptr) {
      agreed = group->exchange<ReplicaPart, Agreement>(index, std::move(part), combine);
    } else {
      std::vector<ReplicaPart> one;
      one.push_back(std::move(part));
      agreed = combine(one);
    }
    const double count = agreed.sums[static_cast<size_t>(2 * c)];
    KDP_CHECK_FOR(op, count > 1.0, ValueError,
                  "expected more than 1 value per channel in the whole batch when training, got {}",
                  count);

    // The whole batch's statistics normalise this replica's part, and update
    // its running statistics (identically on every replica and rank).
    const bool update = layer.is_training() && o.track_running_stats;
    Tensor rm = update ? resolve(layer.running_mean()) : Tensor();
    Tensor rv = update ? resolve(layer.running_var()) : Tensor();
    Tensor mean = Tensor::empty(Shape{c}, dev), invstd = Tensor::empty(Shape{c}, dev);
    sums.from_host(std::vector<double>(agreed.sums.begin(), agreed.sums.begin() + 2 * c));
    bn::statistics(dev, mean.flat(), invstd.flat(), sums.view, count, o.eps,
                   update ? rm.flat() : View1(), update ? rv.flat() : View1(), update, momentum, c);
    if (update) {
      rm.mark_written();
      rv.mark_written();
    }
    Tensor y = Tensor::empty(x.shape(), dev);
    const Tensor w = resolve(layer.weight()), b = resolve(layer.bias());
    bn::normalize(dev, y.flat(), x.cflat(), mean.cflat(), invstd.cflat(),
                  o.affine ? w.cflat() : ConstView1(), o.affine ? b.cflat() : ConstView1(),
                  o.affine, l);
    if (agreed.node) autograd::set_history(y, agreed.node, index);
    return y;
  }

 private:
  // On the last replica to arrive: the sums of all, then of all ranks (one
  // collective), and the node for the backward when one is wanted.
  Agreement agree(std::vector<ReplicaPart>& parts, int64_t channels, double eps) {
    Agreement a;
    std::vector<std::vector<double>> sums;
    for (ReplicaPart& p : parts) sums.push_back(std::move(p.sums));
    a.sums = sum_over_ranks(comm_, sums, exact_terms_);
    std::vector<Tensor> inputs;
    for (const ReplicaPart& p : parts) {
      inputs.push_back(p.x);
      inputs.push_back(p.weight);
      inputs.push_back(p.bias);
    }
    if (autograd::needs_grad(inputs)) {
      a.node = std::make_shared<SyncBatchNormNode>(parts.front().x.device(),
                                                   static_cast<int>(parts.size()), comm_, a.sums,
                                                   channels, eps, exact_terms_);
      a.node->keep(parts);
      a.node->set_next_edges(inputs);
    }
    return a;
  }

  Communicator comm_;
  int exact_terms_ = 0;
};

}  // namespace

std::shared_ptr<nn::BatchNormSynchronizer> batch_norm_synchronizer(Communicator comm) {
  return std::make_shared<Synchronizer>(std::move(comm));
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options,
                             std::optional<Communicator> comm, const Device& device)
    : BatchNorm("SyncBatchNorm", num_features, options, device) {
  synchronize(batch_norm_synchronizer(comm ? *comm : Communicator::world()));
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options,
                             const Device& device,
                             std::shared_ptr<nn::BatchNormSynchronizer> synchronizer)
    : BatchNorm("SyncBatchNorm", num_features, options, device) {
  synchronize(std::move(synchronizer));
}

void SyncBatchNorm::check_input(const Tensor& input) const {
  KDP_CHECK(input.dim() >= 2, ShapeError, "expected [N, C, ...] input, got {}",
            input.shape().str());
}

std::shared_ptr<nn::Module> SyncBatchNorm::clone() const {
  // A copy on the same ranks: it shares this layer's synchronizer, so cloning
  // needs no collective.
  auto copy = std::shared_ptr<SyncBatchNorm>(
      new SyncBatchNorm(num_features(), options(), device(), synchronizer()));
  copy_state_into(*copy);
  copy->train(is_training());
  return copy;
}

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::optional<Communicator> comm) {
  KDP_CHECK(module, StateError, "the module is null");
  const auto sync = batch_norm_synchronizer(comm ? *comm : Communicator::world());
  std::function<void(nn::Module&)> visit = [&](nn::Module& m) {
    if (auto* layer = dynamic_cast<nn::BatchNorm*>(&m)) layer->synchronize(sync);
    for (auto& [name, child] : m.named_children()) visit(*child);
  };
  visit(*module);
  return module;
}

}  // namespace kdp::dist
