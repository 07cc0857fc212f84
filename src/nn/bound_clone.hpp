#pragma once
// The clone of a module that cannot copy itself: it owns copies of the original's
// parameters and buffers and runs the original's forward with those copies bound
// in place of the originals (see kdp/core/binding.hpp).

#include "kdp/core/binding.hpp"
#include "kdp/nn/module.hpp"

namespace kdp::nn {

class BoundClone : public Module {
 public:
  explicit BoundClone(const Module& original);

  Tensor forward(const Tensor& input) override;
  Tensor forward(const TensorList& inputs) override;
  std::shared_ptr<Module> clone() const override;

 private:
  std::shared_ptr<Module> original_;
  TensorBindings bindings_;
};

}  // namespace kdp::nn
