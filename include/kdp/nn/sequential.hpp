#pragma once
/// \file
/// Sequential: children applied in order, named "0", "1", ... as in PyTorch, so
/// state dict keys read "0.weight", "2.bias".

#include <initializer_list>

#include "kdp/nn/module.hpp"

namespace kdp::nn {

/// Children applied in order, named 0, 1, ...
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);

  /// Appends a module under the next index.
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return modules_.at(i); }

  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// An MLP: Linear layers of the given sizes (at least two) with `activation`
/// between them, e.g. mlp({784, 256, 256, 10}) -> 0: Linear, 1: ReLU, 2: Linear, ...
std::shared_ptr<Sequential> mlp(const std::vector<int64_t>& sizes,
                                const std::string& activation = "relu",
                                const Device& device = get_default_device());

}  // namespace kdp::nn
