#include "autograd/accumulate_grad.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/core/error.hpp"

namespace kdp::autograd {

namespace {

// Nothing but `t` refers to its TensorImpl or storage, and it covers the storage
// from its start: safe to keep or to write in place.
bool exclusively_owned(const Tensor& t) {
  const auto& impl = t.impl();
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && impl->offset == 0;
}

}  // namespace

void accumulate(Tensor& slot, Tensor grad, const Device& exec) {
  if (!grad.defined()) return;
  if (!slot.defined()) {
    slot = std::move(grad);
    return;
  }
  KDP_CHECK(slot.shape() == grad.shape(), ShapeError,
            "gradients of shapes {} and {} for one tensor", slot.shape().str(), grad.shape().str());
  if (exclusively_owned(slot)) {
    kdp::detail::axpy(exec, slot.flat(), 1.0f, grad.cflat());
  } else {
    Tensor sum = Tensor::empty(slot.shape(), slot.device());
    kdp::detail::add(exec, sum.flat(), slot.cflat(), grad.cflat());
    slot = sum;
  }
  if (exec != slot.device() && !compat::launches_are_synchronous()) {
    exec.fence("kdp::backward: cross-device accumulation");
  }
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
    : Node(leaf->device), leaf_(std::move(leaf)) {}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>& grad_outputs) {
  Tensor g = std::move(grad_outputs[0]);
  if (!g.defined()) return {};
  const Device& device = leaf_->device;
  KDP_CHECK(g.shape() == leaf_->shape, ShapeError, "gradient of shape {} for leaf {}",
            g.shape().str(), Tensor(leaf_).describe());
  if (g.device() != device) {
    if (g.device().memory_id() == device.memory_id()) {
      g.device().fence("kdp::AccumulateGrad");
      g = alias(g, 0, g.shape(), device);
    } else {
      g = g.to(device);
    }
  }

  Tensor final_grad;
  std::vector<GradReadyHook> hooks;
  {
    std::lock_guard<std::mutex> lock(leaf_->grad_mutex);
    if (!leaf_->grad) {
      if (exclusively_owned(g)) {
        leaf_->grad = g.impl();
      } else {
        Tensor copy = Tensor::empty(g.shape(), device);
        kdp::detail::copy(device, copy.flat(), g.cflat());
        leaf_->grad = copy.impl();
      }
    } else {
      Tensor current(leaf_->grad);
      kdp::detail::axpy(device, current.flat(), 1.0f, g.cflat());
      current.mark_written();
    }
    final_grad = Tensor(leaf_->grad);
    hooks.reserve(leaf_->grad_ready_hooks.size());
    for (const auto& entry : leaf_->grad_ready_hooks) hooks.push_back(entry.second);
  }
  for (auto& hook : hooks) hook(final_grad);
  return {};
}

}  // namespace kdp::autograd
