#pragma once
/// \file
/// Adam and AdamW with PyTorch's update (torch.optim.Adam / AdamW), per step t:
///   Adam:  g = grad + weight_decay * p        AdamW: p = p * (1 - lr * weight_decay)
///   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
///   v_hat = max(v_hat, v) with amsgrad, else v
///   p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)

#include "kdp/optim/optimizer.hpp"

namespace kdp::optim {

/// Learning rate, betas, eps, weight decay and amsgrad of Adam and AdamW.
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;

  /// Chained setters, one per option, to name each where it is set:
  /// AdamOptions{}.with_lr(...).with_amsgrad(...).
  AdamOptions& with_lr(double value) {
    lr = value;
    return *this;
  }
  AdamOptions& with_beta1(double value) {
    beta1 = value;
    return *this;
  }
  AdamOptions& with_beta2(double value) {
    beta2 = value;
    return *this;
  }
  AdamOptions& with_eps(double value) {
    eps = value;
    return *this;
  }
  AdamOptions& with_weight_decay(double value) {
    weight_decay = value;
    return *this;
  }
  AdamOptions& with_amsgrad(bool value) {
    amsgrad = value;
    return *this;
  }
};

/// Adam with PyTorch's update.
class Adam : public Optimizer {
 public:
  Adam(NamedParameters params, AdamOptions options);
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::string type, NamedParameters params, AdamOptions options, bool decoupled);
  void update(const std::string& name, Tensor& param, const Tensor& grad) override;
  std::map<std::string, double> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;
  std::string hyperparameter_problem(const std::map<std::string, double>& values) const override;

 private:
  AdamOptions options_from(const std::map<std::string, double>& values) const;

  AdamOptions options_;
  bool decoupled_;  // AdamW's weight decay
};

/// AdamW: decoupled weight decay; PyTorch's default weight_decay is 0.01.
class AdamW : public Adam {
 public:
  AdamW(NamedParameters params, AdamOptions options);
};

/// AdamW's default options (weight_decay = 0.01).
AdamOptions adamw_defaults();

}  // namespace kdp::optim
