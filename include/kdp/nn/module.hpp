#pragma once
/// \file
/// Module: the base of every layer and model. Named parameters, buffers and
/// children with PyTorch's dotted names ("fc1.weight", "0.bias"), train/eval,
/// zero_grad, to(Device), clone and state dicts. A model is a subclass that
/// registers its pieces in its constructor and overrides forward.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/nn/gradient_exchange.hpp"

namespace kdp::nn {

using TensorList = std::vector<Tensor>;
/// Name -> tensor pairs in registration order (PyTorch's state_dict order).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using StateDict = NamedTensors;

/// The base of every layer and model.
class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The computation of a one-input module.
  virtual Tensor forward(const Tensor& input);
  /// The computation of a module of several inputs; by default the one-input
  /// forward for a single input.
  virtual Tensor forward(const TensorList& inputs);
  /// forward inside the module's Kokkos Tools region (region_name()).
  Tensor operator()(const Tensor& input);
  Tensor operator()(const TensorList& inputs);

  /// Registers a parameter (a leaf that requires grad when `requires_grad`).
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  /// Registers a buffer: state saved in the state dict that is not trained.
  Tensor register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// This module ("") and every descendant, with dotted names.
  std::vector<std::pair<std::string, std::shared_ptr<const Module>>> named_modules() const;
  /// The number of trainable elements.
  int64_t num_parameters() const;

  /// Whether this module's forward meets the other replicas of a DataParallel
  /// forward (SyncBatchNorm does, to reduce its statistics): parallel_apply
  /// then gives every replica a thread of its own.
  virtual bool synchronizes_replicas() const { return false; }

  /// The module a wrapper runs (DataParallel, DistributedDataParallel: the
  /// model they were given); nullptr for every other module.
  virtual std::shared_ptr<Module> wrapped() const { return nullptr; }

  /// The gradient exchange of a module that reduces gradients across ranks
  /// in backward (DistributedDataParallel); nullptr for every other module.
  virtual GradientExchange* gradient_exchange() { return nullptr; }

  /// Training mode for this module and its children (dropout is active in it).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Drops every parameter's gradient (or zeroes it in place).
  void zero_grad(bool set_to_none = true);

  /// A deep copy with its own parameters and buffers of the same values. Built-in
  /// modules copy themselves; for a user module the copy runs the original's
  /// forward with the copy's parameters bound in place of the original's.
  virtual std::shared_ptr<Module> clone() const;

  /// Moves parameters, buffers and gradients to `device`, in place (the same
  /// Tensor handles now live there).
  void to(const Device& device);
  /// The device of the first parameter (or buffer), else the default device.
  Device device() const;

  /// Parameters and buffers by dotted name, in PyTorch's order: each module's
  /// parameters, then its buffers, then its children's.
  StateDict state_dict() const;
  /// Copies values from `dict` into this module's parameters and buffers. Keys
  /// with or without DataParallel's "module." prefix both match. With `strict`,
  /// every missing key, unexpected key and shape mismatch is reported in one
  /// ShapeError; otherwise missing and unexpected keys are skipped.
  void load_state_dict(const StateDict& dict, bool strict = true);
  /// load_state_dict() that lets parameters and buffers take the memory of the
  /// dict's tensors (on the same device memory) instead of copying it: for a
  /// dict made to be loaded, such as a checkpoint's. The checks come first;
  /// nothing changes unless all pass.
  void adopt_state_dict(const StateDict& dict, bool strict = true);

  const std::string& type_name() const { return type_name_; }
  /// "kdp::nn::" and the type name: the Kokkos Tools region of its forward
  /// (opened by operator() and by Sequential for each of its modules).
  const char* region_name() const { return region_name_.c_str(); }
  /// "Sequential(\n  (0): Linear(in_features=10, out_features=100, bias=true)\n ...)".
  std::string to_string() const;
  /// The part inside the parentheses of to_string(), for leaf modules.
  virtual std::string extra_repr() const { return ""; }

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  /// Values of this module's own parameters and buffers copied into `other`
  /// (same names and shapes), used by clone().
  void copy_state_into(Module& other) const;

 private:
  void load_state(const StateDict& dict, bool strict, bool adopt);

  void collect(const std::string& prefix, bool recurse, bool buffers, NamedTensors& out) const;
  void to_string_into(std::string& out, int indent) const;

  std::string type_name_;
  std::string region_name_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

/// Looks up `name` in a state dict; null when absent. The pointer points into
/// `tensors`, so a temporary list (`find(m.state_dict(), ...)`) is refused at
/// compile time: keep the list in a variable first.
const Tensor* find(const NamedTensors& tensors, const std::string& name);
const Tensor* find(NamedTensors&& tensors, const std::string& name) = delete;

}  // namespace kdp::nn
