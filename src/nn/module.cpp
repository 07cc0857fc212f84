#include "kdp/nn/module.hpp"

#include <fmt/format.h>

#include <functional>
#include <set>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/nn/bound_module.hpp"

namespace kdp::nn {

namespace {

void check_name(const char* what, const std::string& name, const std::string& owner) {
  KDP_CHECK_FOR(std::string("kdp::nn::Module::") + what,
                !name.empty() && name.find('.') == std::string::npos, ValueError,
                "name '{}' in {} must be non-empty and without '.'", name, owner);
}

// Moves one tensor's memory to `device` in place: every handle to it follows.
void move_tensor(const Tensor& t, const Device& device) {
  if (!t.defined() || t.device() == device) return;
  TensorImpl& impl = *t.impl();
  impl.device.fence("kdp::nn::Module::to");
  if (impl.device.memory_id() == device.memory_id()) {
    impl.device = device;
  } else {
    Tensor copy = Tensor::empty(t.shape(), device);
    Kokkos::deep_copy(device.space(), copy.flat(), t.cflat());
    impl.storage = copy.impl()->storage;
    impl.offset = 0;
    impl.device = device;
  }
}

}  // namespace

Module::Module(std::string type_name)
    : type_name_(std::move(type_name)), region_name_("kdp::nn::" + type_name_) {}

Tensor Module::operator()(const Tensor& input) {
  trace::Region region(region_name());
  return forward(input);
}

Tensor Module::operator()(const TensorList& inputs) {
  trace::Region region(region_name());
  return forward(inputs);
}

Tensor Module::forward(const Tensor&) {
  KDP_FAIL_FOR(type_name_, StateError, "forward(Tensor) is not implemented; override forward");
}

Tensor Module::forward(const TensorList& inputs) {
  if (inputs.size() == 1) return forward(inputs[0]);
  KDP_FAIL_FOR(type_name_, StateError,
               "forward of {} inputs is not implemented; override "
               "forward(const TensorList&)",
               inputs.size());
}

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_name("register_parameter", name, type_name_);
  KDP_CHECK_FOR(type_name_, value.defined(), StateError, "parameter '{}' is undefined", name);
  KDP_CHECK_FOR(type_name_, find(parameters_, name) == nullptr, ValueError,
                "parameter '{}' is already registered", name);
  // A bound replica's parameter is a view made by an op; it keeps its history.
  if (value.is_leaf()) value.requires_grad_(requires_grad);
  value.set_name(name);
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_name("register_buffer", name, type_name_);
  KDP_CHECK_FOR(type_name_, find(buffers_, name) == nullptr, ValueError,
                "buffer '{}' is already registered", name);
  value.set_name(name);
  buffers_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_name("register_module", name, type_name_);
  KDP_CHECK_FOR(type_name_, module, StateError, "child module '{}' is null", name);
  for (const auto& [existing, child] : children_) {
    KDP_CHECK_FOR(type_name_, existing != name, ValueError,
                  "child module '{}' is already registered", name);
  }
  // Error messages name a parameter by its path from here ("fc1.weight").
  for (auto& [pname, t] : module->named_parameters()) Tensor(t).set_name(name + "." + pname);
  for (auto& [bname, t] : module->named_buffers()) Tensor(t).set_name(name + "." + bname);
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool recurse, bool buffers,
                     NamedTensors& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) {
    child->collect(prefix + name + ".", true, buffers, out);
  }
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors all;
  collect("", recurse, false, all);
  // A parameter two modules share (tied weights) is listed once, under its
  // first name, as PyTorch's named_parameters() does; state_dict() lists it
  // under every name.
  NamedTensors out;
  std::set<const void*> seen;
  for (auto& [name, t] : all) {
    if (seen.insert(t.impl().get()).second) out.emplace_back(std::move(name), t);
  }
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", recurse, true, out);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, std::shared_ptr<const Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<const Module>>> out;
  out.emplace_back("", shared_from_this());
  for (const auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules()) {
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
    }
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.requires_grad() ? t.numel() : 0;
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [name, p] : named_parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      Tensor(p).set_grad(Tensor());
    } else {
      g.zero_();
    }
  }
}

std::shared_ptr<Module> Module::clone() const {
  return std::make_shared<BoundModule>(*this, BoundModule::copies);
}

void Module::copy_state_into(Module& other) const {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    other.parameters_[i].second.copy_(parameters_[i].second);
  }
  for (size_t i = 0; i < buffers_.size(); ++i) other.buffers_[i].second.copy_(buffers_[i].second);
  other.training_ = training_;
}

void Module::to(const Device& device) {
  for (auto& [name, t] : named_parameters()) {
    move_tensor(t, device);
    move_tensor(t.grad(), device);
  }
  for (auto& [name, t] : named_buffers()) move_tensor(t, device);
}

Device Module::device() const {
  for (auto& [name, t] : named_parameters()) return t.device();
  for (auto& [name, t] : named_buffers()) return t.device();
  return get_default_device();
}

StateDict Module::state_dict() const {
  // PyTorch's order: each module's parameters, then its buffers, then its
  // children's entries (what model signatures and outside writers follow).
  StateDict out;
  std::function<void(const Module&, const std::string&)> visit = [&](const Module& m,
                                                                     const std::string& prefix) {
    for (const auto& [name, t] : m.parameters_) out.emplace_back(prefix + name, t);
    for (const auto& [name, t] : m.buffers_) out.emplace_back(prefix + name, t);
    for (const auto& [name, child] : m.children_) visit(*child, prefix + name + ".");
  };
  visit(*this, "");
  return out;
}

void Module::load_state_dict(const StateDict& dict, bool strict) {
  load_state(dict, strict, /*adopt=*/false);
}

void Module::adopt_state_dict(const StateDict& dict, bool strict) {
  load_state(dict, strict, /*adopt=*/true);
}

void Module::load_state(const StateDict& dict_in, bool strict, bool adopt) {
  const StateDict own = state_dict();
  std::set<std::string> known;
  for (const auto& [name, t] : own) known.insert(name);
  // Keys saved through DataParallel carry a "module." prefix that a bare model's
  // keys lack, and the other way round: accept both.
  const std::string prefix = "module.";
  StateDict dict;
  for (const auto& [key, t] : dict_in) {
    std::string k = key;
    if (known.count(k) == 0) {
      if (k.rfind(prefix, 0) == 0 && known.count(k.substr(prefix.size())) != 0) {
        k = k.substr(prefix.size());
      } else if (known.count(prefix + k) != 0) {
        k = prefix + k;
      }
    }
    dict.emplace_back(k, t);
  }
  std::vector<std::string> problems;
  for (const auto& [name, t] : own) {
    const Tensor* src = find(dict, name);
    if (src == nullptr) {
      if (strict) problems.push_back(fmt::format("missing key '{}'", name));
      continue;
    }
    if (src->shape() != t.shape()) {
      problems.push_back(fmt::format("'{}' has shape {} in the dict but {} in the model", name,
                                     src->shape().str(), t.shape().str()));
    }
  }
  if (strict) {
    for (const auto& [name, t] : dict) {
      if (known.count(name) == 0) problems.push_back(fmt::format("unexpected key '{}'", name));
    }
  }
  if (!problems.empty()) {
    KDP_FAIL_FOR(type_name_ + "::load_state_dict", ShapeError, "{} problem(s): {}", problems.size(),
                 fmt::join(problems, "; "));
  }
  for (const auto& [name, t] : own) {
    const Tensor* src = find(dict, name);
    if (src == nullptr) continue;
    Tensor dst = t;
    if (src->device().memory_id() == dst.device().memory_id()) {
      if (src->device() != dst.device()) src->device().fence("kdp::nn::Module::load_state_dict");
      if (adopt) {
        dst.set_data(src->detach());
      } else {
        dst.copy_(src->detach());
      }
    } else {
      dst.copy_(src->to(dst.device()));
    }
  }
}

std::string Module::to_string() const {
  std::string out;
  to_string_into(out, 0);
  return out;
}

void Module::to_string_into(std::string& out, int indent) const {
  out += type_name_ + "(" + extra_repr();
  if (!children_.empty()) {
    out += "\n";
    for (const auto& [name, child] : children_) {
      out += std::string(static_cast<size_t>(indent + 2), ' ') + "(" + name + "): ";
      child->to_string_into(out, indent + 2);
      out += "\n";
    }
    out += std::string(static_cast<size_t>(indent), ' ');
  }
  out += ")";
}

const Tensor* find(const NamedTensors& tensors, const std::string& name) {
  for (const auto& entry : tensors) {
    if (entry.first == name) return &entry.second;
  }
  return nullptr;
}

}  // namespace kdp::nn
