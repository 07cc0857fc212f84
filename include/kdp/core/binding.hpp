#pragma once
/// \file
/// Tensor bindings: within a BindingScope, every op on this thread reads the
/// bound tensor in place of the one it was given. This is how a replica of a
/// module runs the original's forward with its parameters bound to per-device
/// copies or views (see kdp::replicate), without the module having to be
/// cloneable.

#include <unordered_map>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// Replacement tensors that ops read in place of the ones they are given.
class TensorBindings {
 public:
  /// Ops will read `replacement` where they are given `original`.
  void bind(const Tensor& original, Tensor replacement);
  /// The replacement of `original`, or null.
  const Tensor* find(const TensorImpl* original) const {
    auto it = map_.find(original);
    return it == map_.end() ? nullptr : &it->second;
  }
  bool empty() const { return map_.empty(); }
  size_t size() const { return map_.size(); }

 private:
  std::unordered_map<const TensorImpl*, Tensor> map_;
};

namespace detail {
extern thread_local const TensorBindings* current_bindings;
}

/// Makes `bindings` active on this thread for the scope's lifetime.
class BindingScope {
 public:
  explicit BindingScope(const TensorBindings* bindings) : previous_(detail::current_bindings) {
    detail::current_bindings = bindings;
  }
  ~BindingScope() { detail::current_bindings = previous_; }
  BindingScope(const BindingScope&) = delete;
  BindingScope& operator=(const BindingScope&) = delete;

 private:
  const TensorBindings* previous_;
};

/// The tensor an op should read for `t`: its binding in the active scope, or `t`.
inline const Tensor& resolve(const Tensor& t) {
  const TensorBindings* b = detail::current_bindings;
  if (b == nullptr || !t.defined()) return t;
  const Tensor* r = b->find(t.impl().get());
  return r != nullptr ? *r : t;
}

}  // namespace kdp
