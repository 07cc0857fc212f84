#pragma once
/// \file
/// Loss modules. A loss is anything callable as loss(output, target) -> scalar
/// Tensor: these modules, or a user function built from ops (its gradient comes
/// from autograd with no extra code), held as a LossFunction.

#include <functional>

#include "kdp/nn/module.hpp"
#include "kdp/ops/loss.hpp"

namespace kdp::nn {

using LossFunction = std::function<Tensor(const Tensor& output, const Tensor& target)>;

/// Base of loss modules: forward(output, target).
class Loss : public Module {
 public:
  explicit Loss(std::string type_name, Reduction reduction = Reduction::Mean)
      : Module(std::move(type_name)), reduction_(reduction) {}
  virtual Tensor forward(const Tensor& output, const Tensor& target) = 0;
  Tensor forward(const TensorList& inputs) override;
  using Module::forward;
  Tensor operator()(const Tensor& output, const Tensor& target) { return forward(output, target); }
  Reduction reduction() const { return reduction_; }

 private:
  Reduction reduction_;
};

/// Mean squared error.
class MSELoss : public Loss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : Loss("MSELoss", reduction) {}
  Tensor forward(const Tensor& output, const Tensor& target) override;
  using Loss::forward;
};

/// Mean absolute error.
class L1Loss : public Loss {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : Loss("L1Loss", reduction) {}
  Tensor forward(const Tensor& output, const Tensor& target) override;
  using Loss::forward;
};

/// PyTorch's SmoothL1Loss (quadratic below beta, linear above).
class SmoothL1Loss : public Loss {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0)
      : Loss("SmoothL1Loss", reduction), beta_(beta) {}
  Tensor forward(const Tensor& output, const Tensor& target) override;
  using Loss::forward;

 private:
  double beta_;
};

/// PyTorch's HuberLoss (quadratic below delta, delta-sloped above).
class HuberLoss : public Loss {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::Mean, double delta = 1.0)
      : Loss("HuberLoss", reduction), delta_(delta) {}
  Tensor forward(const Tensor& output, const Tensor& target) override;
  using Loss::forward;

 private:
  double delta_;
};

/// Cross entropy of logits [B, C] against class indices [B], with PyTorch's
/// class weights, ignored index and label smoothing.
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(Reduction reduction = Reduction::Mean)
      : Loss("CrossEntropyLoss", reduction) {
    options_.reduction = reduction;
  }
  explicit CrossEntropyLoss(ClassLossOptions options)
      : Loss("CrossEntropyLoss", options.reduction), options_(std::move(options)) {}
  Tensor forward(const Tensor& output, const Tensor& target) override;
  using Loss::forward;
  const ClassLossOptions& options() const { return options_; }

 private:
  ClassLossOptions options_;
};

/// Negative log-likelihood of log-probabilities [B, C] against class indices
/// [B] (after log_softmax: together, cross entropy).
class NLLLoss : public Loss {
 public:
  explicit NLLLoss(ClassLossOptions options = {})
      : Loss("NLLLoss", options.reduction), options_(std::move(options)) {}
  Tensor forward(const Tensor& output, const Tensor& target) override;
  using Loss::forward;

 private:
  ClassLossOptions options_;
};

}  // namespace kdp::nn
