#pragma once
/// \file
/// BoundModule: runs another module's forward with each of that module's
/// parameters and buffers replaced by a tensor of its own (see
/// kdp/core/binding.hpp). It reports those tensors under the original's dotted
/// names, so it looks like the original with other parameters. clone() of a
/// user module returns one whose tensors are copies; replicate() returns one per
/// device whose parameters are views or copies linked to the original's for
/// backward. The original's train/eval mode and other state are shared.

#include <functional>

#include "kdp/core/binding.hpp"
#include "kdp/nn/module.hpp"

namespace kdp::nn {

/// Runs another module's forward with its parameters bound to tensors of its own.
class BoundModule : public Module {
 public:
  /// Makes the tensor that stands for `original` (a parameter when !is_buffer).
  using Binder = std::function<Tensor(const Tensor& original, bool is_buffer)>;

  BoundModule(const Module& original, const Binder& bind);

  /// A Binder that gives each tensor a copy of its own (what clone() uses).
  static Tensor copies(const Tensor& original, bool is_buffer);

  Tensor forward(const Tensor& input) override;
  Tensor forward(const TensorList& inputs) override;
  std::shared_ptr<Module> clone() const override;

  const std::shared_ptr<Module>& original() const { return original_; }
  const TensorBindings& bindings() const { return bindings_; }

 private:
  std::shared_ptr<Module> original_;
  TensorBindings bindings_;
};

}  // namespace kdp::nn
