#pragma once
/// \file
/// LayerNorm with PyTorch's arguments (normalized_shape, eps = 1e-5,
/// elementwise_affine, bias) and parameters weight (ones) and bias (zeros) of
/// normalized_shape, so that a state_dict crosses both ways.

#include <cstdint>
#include <vector>

#include "kdp/nn/module.hpp"

namespace kdp::nn {

/// Normalises the last dimensions of its input (kdp::layer_norm).
class LayerNorm : public Module {
 public:
  /// Throws ShapeError for an empty normalized_shape or a size below 1.
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true, bool bias = true,
                     const Device& device = get_default_device());

  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  const std::vector<int64_t>& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::vector<int64_t> normalized_shape_;
  double eps_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace kdp::nn
