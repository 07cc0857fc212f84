#include "kdp/optim/optimizer.hpp"

#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "core/check.hpp"
#include "core/numbers.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/module.hpp"

namespace kdp::optim {

Optimizer::Optimizer(std::string type, NamedParameters params, double lr)
    : type_(std::move(type)), params_(std::move(params)), lr_(lr) {
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type_), kdp::detail::is_finite_nonnegative(lr), ValueError,
                "learning rate {} is not finite and >= 0", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type_), p.defined(), StateError, "parameter '{}' is undefined",
                  name);
    for (size_t j = 0; j < i; ++j) {
      KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type_), params_[j].first != name, ValueError,
                    "parameter name '{}' appears twice", name);
    }
  }
}

void Optimizer::set_lr(double lr) {
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type_), kdp::detail::is_finite_nonnegative(lr), ValueError,
                "learning rate {} is not finite and >= 0", lr);
  lr_ = lr;
}

uint64_t Optimizer::add_pre_step_hook(std::function<void()> hook) {
  pre_step_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Optimizer::remove_pre_step_hook(uint64_t id) {
  for (auto it = pre_step_hooks_.begin(); it != pre_step_hooks_.end(); ++it) {
    if (it->first == id) {
      pre_step_hooks_.erase(it);
      return;
    }
  }
}

void Optimizer::step() {
  for (auto& [id, hook] : pre_step_hooks_) hook();
  gathered_.reset();
  NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.shape() != p.shape()) {
      KDP_FAIL_FOR(KDP_ORIGIN_NAMED(type_), ShapeError, "gradient {} of parameter '{}' {}",
                   g.shape().str(), name, p.shape().str());
    }
    if (!sharding_.range) {
      update(name, p, g);
    } else {
      const auto [begin, end] = sharding_.range(name);
      if (begin >= end) continue;  // another rank's
      Tensor part = alias(p, begin, {end - begin}, p.device());
      update(name, part, alias(g, begin, {end - begin}, g.device()));
    }
    p.mark_written();
  }
  if (sharding_.after_step) sharding_.after_step();
}

void Optimizer::set_sharding(Sharding sharding) {
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type_), tensor_state_.empty() && scalar_state_.empty(), StateError,
                "shard the optimizer before its first step (it holds state for {} parameter(s))",
                tensor_state_.size());
  sharding_ = std::move(sharding);
  gathered_.reset();
}

void Optimizer::clear_sharding() {
  sharding_ = Sharding{};
  gathered_.reset();
}

void Optimizer::gather_state() {
  gathered_.reset();
  if (sharding_.gather) gathered_ = sharding_.gather(local_state());
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& [name, p] : params_) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      g.zero_();
    }
  }
}

std::pair<int64_t, int64_t> Optimizer::owned_range(const std::string& name) const {
  const Tensor* p = nn::find(params_, name);
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type_), p != nullptr, ValueError,
                "'{}' is not a parameter of the optimizer", name);
  if (sharding_.range) return sharding_.range(name);
  return {0, p->numel()};
}

std::optional<OptimizerState> Optimizer::state_layout() const {
  OptimizerState s = local_state(StateTensors::Undefined);
  if (sharding_.gather_layout) return sharding_.gather_layout(s);
  return s;
}

OptimizerState Optimizer::state_dict() const {
  if (gathered_) return *gathered_;
  return local_state();
}

size_t Optimizer::state_bytes() const {
  size_t bytes = 0;
  for (const auto& [name, entries] : tensor_state_) {
    for (const auto& [key, t] : entries) bytes += static_cast<size_t>(t.numel()) * sizeof(float);
  }
  return bytes;
}

OptimizerState Optimizer::state_view() const {
  if (gathered_) return *gathered_;
  return local_state(StateTensors::Shared);
}

OptimizerState Optimizer::local_state(StateTensors tensors) const {
  OptimizerState s;
  s.type = type_;
  s.hyperparameters = hyperparameters();
  s.hyperparameters["lr"] = lr_;
  for (const auto& [name, entries] : tensor_state_) {
    for (const auto& [key, t] : entries) {
      s.tensors[name][key] = tensors == StateTensors::Copies   ? t.detach().clone()
                             : tensors == StateTensors::Shared ? t.detach()
                                                               : Tensor();
    }
  }
  s.scalars = scalar_state_;
  return s;
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  load_state(state, /*adopt=*/false);
}

void Optimizer::adopt_state_dict(const OptimizerState& state) {
  load_state(state, /*adopt=*/true);
}

std::string Optimizer::refusal(const std::function<void()>& check) {
  try {
    check();
  } catch (const ValueError& e) {
    return e.what();
  }
  return {};
}

std::vector<std::string> Optimizer::state_problems(const OptimizerState& state) const {
  if (state.type != type_) return {fmt::format("the state is of a {} optimizer", state.type)};
  std::vector<std::string> problems;
  for (const auto& [name, entries] : state.tensors) {
    const Tensor* p = nn::find(params_, name);
    if (p == nullptr) {
      problems.push_back(fmt::format("state for unknown parameter '{}'", name));
      continue;
    }
    for (const auto& [key, t] : entries) {
      if (t.shape() != p->shape()) {
        problems.push_back(fmt::format("'{}/{}' has shape {} but the parameter has {}", name, key,
                                       t.shape().str(), p->shape().str()));
      }
    }
  }
  for (const auto& [name, entries] : state.scalars) {
    if (nn::find(params_, name) == nullptr) {
      problems.push_back(fmt::format("state for unknown parameter '{}'", name));
    }
    for (const auto& [key, v] : entries) {
      if (!std::isfinite(v))
        problems.push_back(fmt::format("'{}/{}' = {} is not finite", name, key, v));
    }
  }
  auto lr = state.hyperparameters.find("lr");
  if (lr != state.hyperparameters.end() && !kdp::detail::is_finite_nonnegative(lr->second)) {
    problems.push_back(fmt::format("learning rate {} is not finite and >= 0", lr->second));
  }
  const std::string why = hyperparameter_problem(state.hyperparameters);
  if (!why.empty()) problems.push_back(why);
  return problems;
}

void Optimizer::load_state(const OptimizerState& state, bool adopt) {
  const std::vector<std::string> problems = state_problems(state);
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type_ + "::load_state_dict"), problems.empty(), ValueError, "{}",
                fmt::join(problems, "; "));
  // Checked above: from here on nothing is refused.
  set_hyperparameters(state.hyperparameters);
  auto lr = state.hyperparameters.find("lr");
  if (lr != state.hyperparameters.end()) set_lr(lr->second);
  tensor_state_.clear();
  gathered_.reset();
  for (const auto& [name, entries] : state.tensors) {
    const Tensor* p = nn::find(params_, name);
    // Sharded: this rank's range of each entry, flat.
    int64_t begin = 0, end = p->numel();
    if (sharding_.range) std::tie(begin, end) = sharding_.range(name);
    if (begin >= end) continue;  // another rank's
    const bool whole = !sharding_.range;
    for (const auto& [key, full] : entries) {
      const Tensor t = whole ? full : alias(full, begin, {end - begin}, full.device());
      if (adopt && whole && t.device() == p->device()) {  // a share is copied: the rest freed
        tensor_state_[name][key] = t.detach();
        continue;
      }
      Tensor copy =
          Tensor::empty_labeled(t.shape(), p->device(), "kdp::optim::" + type_ + "::" + key);
      copy.copy_(t.device() == p->device() ? t : t.to(p->device()));
      tensor_state_[name][key] = copy;
    }
  }
  scalar_state_.clear();
  for (const auto& [name, entries] : state.scalars) {
    if (sharding_.range) {
      const auto [begin, end] = sharding_.range(name);
      if (begin >= end) continue;
    }
    scalar_state_[name] = entries;
  }
}

NamedParameters name_parameters(const std::vector<Tensor>& params) {
  NamedParameters out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back(std::to_string(i), params[i]);
  return out;
}

}  // namespace kdp::optim
