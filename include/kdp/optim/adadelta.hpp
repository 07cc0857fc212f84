#pragma once
/// \file
/// Adadelta with PyTorch's update (torch.optim.Adadelta), per parameter:
///   g = grad + weight_decay * p
///   v = rho v + (1 - rho) g^2                          (square_avg)
///   d = sqrt(u + eps) / sqrt(v + eps) * g              (u: acc_delta)
///   u = rho u + (1 - rho) d^2
///   p = p - lr * d

#include "kdp/optim/optimizer.hpp"

namespace kdp::optim {

/// Learning rate, rho, eps and weight decay of Adadelta (PyTorch's defaults).
struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0.0;

  /// Chained setters, one per option, to name each where it is set:
  /// AdadeltaOptions{}.with_lr(...).with_weight_decay(...).
  AdadeltaOptions& with_lr(double value) {
    lr = value;
    return *this;
  }
  AdadeltaOptions& with_rho(double value) {
    rho = value;
    return *this;
  }
  AdadeltaOptions& with_eps(double value) {
    eps = value;
    return *this;
  }
  AdadeltaOptions& with_weight_decay(double value) {
    weight_decay = value;
    return *this;
  }
};

/// Adadelta, as PyTorch's: state square_avg, acc_delta and step per parameter.
class Adadelta : public Optimizer {
 public:
  Adadelta(NamedParameters params, AdadeltaOptions options = {});
  const AdadeltaOptions& options() const { return options_; }

 protected:
  void update(const std::string& name, Tensor& param, const Tensor& grad) override;
  std::map<std::string, double> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;
  std::string hyperparameter_problem(const std::map<std::string, double>& values) const override;

 private:
  AdadeltaOptions options_from(const std::map<std::string, double>& values) const;

  AdadeltaOptions options_;
};

}  // namespace kdp::optim
