#pragma once
/// \file
/// SGD with PyTorch's update (torch.optim.SGD):
///   g = grad + weight_decay * p
///   b = g on the first step, else momentum * b + (1 - dampening) * g
///   g = g + momentum * b (Nesterov) or b (momentum != 0)
///   p = p - lr * g

#include "kdp/optim/optimizer.hpp"

namespace kdp::optim {

/// Learning rate, momentum, dampening, weight decay and Nesterov of SGD.
struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;

  /// Chained setters, one per option, to name each where it is set:
  /// SGDOptions{}.with_lr(...).with_nesterov(...).
  SGDOptions& with_lr(double value) {
    lr = value;
    return *this;
  }
  SGDOptions& with_momentum(double value) {
    momentum = value;
    return *this;
  }
  SGDOptions& with_dampening(double value) {
    dampening = value;
    return *this;
  }
  SGDOptions& with_weight_decay(double value) {
    weight_decay = value;
    return *this;
  }
  SGDOptions& with_nesterov(bool value) {
    nesterov = value;
    return *this;
  }
};

/// SGD with momentum, dampening, Nesterov and weight decay, as PyTorch's.
class SGD : public Optimizer {
 public:
  SGD(NamedParameters params, SGDOptions options);
  const SGDOptions& options() const { return options_; }

 protected:
  void update(const std::string& name, Tensor& param, const Tensor& grad) override;
  std::map<std::string, double> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;
  std::string hyperparameter_problem(const std::map<std::string, double>& values) const override;

 private:
  SGDOptions options_from(const std::map<std::string, double>& values) const;

  SGDOptions options_;
};

}  // namespace kdp::optim
