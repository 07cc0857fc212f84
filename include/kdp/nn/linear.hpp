#pragma once
/// \file
/// Linear: y = x W^T + b with PyTorch's layout (weight [out, in]) and default
/// initialisation (Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in))
/// for weight and bias), so weights move between the two without transposes.

#include "kdp/nn/module.hpp"

namespace kdp::nn {

/// y = x W^T + b with PyTorch's layout and initialisation.
class Linear : public Module {
 public:
  /// Throws ValueError when the parameters cannot fit in `device`'s memory.
  Linear(int64_t in_features, int64_t out_features, bool bias = true,
         const Device& device = get_default_device());

  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  /// The bytes of a layer's weight and bias, checked for overflow (ShapeError).
  static size_t parameter_bytes(int64_t in_features, int64_t out_features, bool bias = true);

  /// Draws new weights (and bias) from the device's generator.
  void reset_parameters();

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t in_features_;
  int64_t out_features_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace kdp::nn
