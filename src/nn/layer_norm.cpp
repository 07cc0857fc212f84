#include "kdp/nn/layer_norm.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/check.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/ops/normalization.hpp"

namespace kdp::nn {

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double eps, bool elementwise_affine,
                     bool bias, const Device& device)
    : Module("LayerNorm"), normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  const std::string shape = fmt::format("[{}]", fmt::join(normalized_shape_, ", "));
  KDP_CHECK(!normalized_shape_.empty(), ShapeError,
            "normalized_shape is empty: name the trailing dimension(s) to normalise");
  for (int64_t d : normalized_shape_) {
    KDP_CHECK(d >= 1, ShapeError, "normalized_shape {} holds a size below 1", shape);
  }
  KDP_CHECK(eps > 0.0, ValueError, "eps {} must be positive", eps);
  if (elementwise_affine) {
    NoGradGuard no_grad;
    const Shape s(normalized_shape_);
    weight_ =
        register_parameter("weight", Tensor::empty_labeled(s, device, "kdp::LayerNorm::weight"));
    weight_.fill_(1.0f);
    if (bias) {
      bias_ = register_parameter("bias", Tensor::empty_labeled(s, device, "kdp::LayerNorm::bias"));
      bias_.zero_();
    }
  }
}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape_, weight_, bias_, eps_);
}

std::shared_ptr<Module> LayerNorm::clone() const {
  auto copy = std::make_shared<LayerNorm>(normalized_shape_, eps_, weight_.defined(),
                                          bias_.defined(), device());
  copy_state_into(*copy);
  copy->train(is_training());
  return copy;
}

std::string LayerNorm::extra_repr() const {
  // PyTorch's tuple: "(64,)", "(2, 4)".
  const std::string shape = normalized_shape_.size() == 1
                                ? fmt::format("({},)", normalized_shape_[0])
                                : fmt::format("({})", fmt::join(normalized_shape_, ", "));
  return fmt::format("{}, eps={}, elementwise_affine={}", shape, eps_, weight_.defined());
}

}  // namespace kdp::nn
