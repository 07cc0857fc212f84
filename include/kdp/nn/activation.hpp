#pragma once
/// \file
/// Activation modules (stateless wrappers of kdp/ops/activation.hpp), Dropout and
/// Flatten.

#include <string>

#include "kdp/nn/module.hpp"

namespace kdp::nn {

/// The ReLU activation.
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
};

/// Leaky ReLU with a negative slope.
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(float negative_slope = 0.01f)
      : Module("LeakyReLU"), negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  float negative_slope_;
};

/// The hyperbolic tangent.
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
};

/// The logistic sigmoid.
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
};

/// The GELU activation, exact ("none", the default) or in PyTorch's "tanh"
/// form (see kdp::gelu); another word is a ValueError.
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

/// Zeroes elements with probability p in training mode (scaling the rest by
/// 1 / (1 - p)); the identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f);
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  float p_;
};

/// Zeroes whole channels with probability p in training mode (scaling the
/// rest by 1 / (1 - p)); the identity in eval mode.
class Dropout2d : public Module {
 public:
  explicit Dropout2d(float p = 0.5f);
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  float p_;
};

/// Flattens dimensions start_dim..end_dim into one (default: all but the batch).
class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;
  int start_dim() const { return start_dim_; }
  int end_dim() const { return end_dim_; }

 private:
  int start_dim_;
  int end_dim_;
};

/// A module by the name PyTorch uses for an activation: "relu", "leaky_relu",
/// "tanh", "sigmoid", "gelu". Throws ValueError for other names.
std::shared_ptr<Module> make_activation(const std::string& name);

}  // namespace kdp::nn
