#pragma once
/// \file
/// AccumulateGrad: the node at the end of every path to a leaf. The engine runs
/// it once per backward pass, after every contribution to the leaf has been
/// summed, so when it has added them to `.grad()` the gradient is final and the
/// leaf's grad-ready hooks fire.

#include "kdp/autograd/node.hpp"

namespace kdp::autograd {

/// The node that sums a leaf's gradient into .grad() and fires its hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  const char* name() const override { return "kdp::AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

/// Adds `grad` into `slot`: takes it as is when the slot is empty, adds in place
/// when the slot is not shared with anything else, else replaces the slot by the
/// sum. Kernels run on `exec` (the instance of the calling thread).
void accumulate(Tensor& slot, Tensor grad, const Device& exec);

}  // namespace kdp::autograd
