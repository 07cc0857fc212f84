#include "kdp/dist/comm_hook.hpp"

#include <vector>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::dist {

namespace {

class Allreduce : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  Request launch(GradientBucket& bucket, Communicator& comm) override {
    return comm.iallreduce(bucket.buffer(), ReduceOp::Average);
  }
};

class Routed : public CommHook {
 public:
  explicit Routed(AllreduceRoute route) : route_(route) {}
  std::string name() const override {
    if (route_.hierarchical) return route_.bfloat16 ? "hierarchical-bf16" : "hierarchical";
    return "bf16";
  }
  // Each bucket has its residual, which the reduction adds to the bucket and
  // refills with what rounding took (AllreduceRoute::residual). Its scale is
  // the sum's: whatever a rounding took from the sum over ranks, one rank adds
  // back to its next contribution.
  Request launch(GradientBucket& bucket, Communicator& comm) override {
    Tensor& g = bucket.buffer();
    AllreduceRoute route = route_;
    if (route.bfloat16) {
      std::vector<float>& residual = residual_[bucket.index()];
      residual.resize(static_cast<size_t>(g.numel()), 0.0f);
      route.residual = residual.data();
    }
    return comm.iallreduce(g, ReduceOp::Average, route);
  }

 private:
  AllreduceRoute route_;
  std::map<size_t, std::vector<float>> residual_;  // per bucket
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() {
  return std::make_shared<Allreduce>();
}

std::shared_ptr<CommHook> bf16_compress_hook() {
  return std::make_shared<Routed>(AllreduceRoute{true, false});
}

std::shared_ptr<CommHook> hierarchical_hook(bool bf16) {
  return std::make_shared<Routed>(AllreduceRoute{bf16, true});
}

std::shared_ptr<CommHook> comm_hook_named(const std::string& name) {
  if (name == "allreduce") return allreduce_hook();
  if (name == "bf16") return bf16_compress_hook();
  if (name == "hierarchical") return hierarchical_hook(false);
  if (name == "hierarchical-bf16") return hierarchical_hook(true);
  KDP_FAIL(ValueError, "{}",
           "unknown communication hook '" + name +
               "' (allreduce, bf16, hierarchical or hierarchical-bf16)");
}

}  // namespace kdp::dist
