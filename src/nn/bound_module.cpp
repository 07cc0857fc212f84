#include "kdp/nn/bound_module.hpp"

#include <algorithm>
#include <map>
#include <string>

namespace kdp::nn {

BoundModule::BoundModule(const Module& original, const Binder& bind)
    : Module(original.type_name()),
      original_(std::const_pointer_cast<Module>(original.shared_from_this())) {
  // Shadow modules mirror the original's tree so that the bound tensors carry
  // the original's dotted names ("fc1.weight") in named_parameters and state_dict.
  std::map<std::string, Module*> shadows{{"", this}};
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> pending;
  // A parameter two modules share (tied weights) is bound once; its second
  // name gets the same bound tensor.
  std::map<const void*, Tensor> bound;
  for (const auto& [path, m] : original.named_modules()) {
    Module* shadow = this;
    if (!path.empty()) {
      auto node = std::make_shared<Module>(m->type_name());
      shadow = node.get();
      pending.emplace_back(path, node);
      shadows[path] = shadow;
    }
    for (const auto& [name, p] : m->named_parameters(false)) {
      const auto it = bound.find(p.impl().get());
      if (it != bound.end()) {
        shadow->register_parameter(name, it->second, p.requires_grad());
        continue;
      }
      const Tensor b = shadow->register_parameter(name, bind(p, false), p.requires_grad());
      bindings_.bind(p, b);
      bound.emplace(p.impl().get(), b);
    }
    for (const auto& [name, b] : m->named_buffers(false)) {
      bindings_.bind(b, shadow->register_buffer(name, bind(b, true)));
    }
  }
  // Attach children deepest first, so that each is complete when attached, and
  // siblings in their original order.
  auto depth = [](const std::string& path) { return std::count(path.begin(), path.end(), '.'); };
  std::stable_sort(pending.begin(), pending.end(),
                   [&](const auto& a, const auto& b) { return depth(a.first) > depth(b.first); });
  for (const auto& [path, node] : pending) {
    const size_t dot = path.rfind('.');
    Module* parent = shadows[dot == std::string::npos ? "" : path.substr(0, dot)];
    parent->register_module(dot == std::string::npos ? path : path.substr(dot + 1), node);
  }
  train(original.is_training());
}

Tensor BoundModule::copies(const Tensor& original, bool) {
  Tensor c = Tensor::empty_labeled(original.shape(), original.device(), "kdp::nn::clone");
  c.copy_(original.detach());
  return c;
}

Tensor BoundModule::forward(const Tensor& input) {
  BindingScope scope(&bindings_);
  return original_->forward(input);
}

Tensor BoundModule::forward(const TensorList& inputs) {
  BindingScope scope(&bindings_);
  return original_->forward(inputs);
}

std::shared_ptr<Module> BoundModule::clone() const {
  // A copy of this module's current values, bound to the same original.
  const StateDict values = state_dict();
  auto copy = std::make_shared<BoundModule>(*original_, copies);
  copy->load_state_dict(values);
  return copy;
}

}  // namespace kdp::nn
