#include "kdp/nn/linear.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/init.hpp"
#include "kdp/nn/parameter_memory.hpp"
#include "kdp/ops/linear.hpp"

namespace kdp::nn {

size_t Linear::parameter_bytes(int64_t in_features, int64_t out_features, bool bias) {
  const std::string what = fmt::format("kdp::nn::Linear({}, {})", in_features, out_features);
  KDP_CHECK_FOR(what, in_features >= 0 && out_features >= 0, ShapeError,
                "negative size in_features={} out_features={}", in_features, out_features);
  const int64_t weights = checked_numel({out_features, in_features}, sizeof(float), what);
  // No wrap-around: weights * 4 fits, and out_features <= weights unless in_features is 0.
  const int64_t values = weights + (bias ? out_features : 0);
  return checked_bytes(values, sizeof(float), what);
}

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, const Device& device)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  check_parameters_fit({{"", fmt::format("Linear({}, {})", in_features, out_features),
                         parameter_bytes(in_features, out_features, bias)}},
                       device, fmt::format("kdp::nn::Linear({}, {})", in_features, out_features));
  weight_ = register_parameter(
      "weight", Tensor::empty_labeled({out_features, in_features}, device, "kdp::Linear::weight"));
  if (bias) {
    bias_ = register_parameter("bias",
                               Tensor::empty_labeled({out_features}, device, "kdp::Linear::bias"));
  }
  reset_parameters();
}

void Linear::reset_parameters() {
  NoGradGuard no_grad;
  init::kaiming_uniform_(weight_, std::sqrt(5.0f));
  if (bias_.defined()) {
    const float bound =
        in_features_ > 0 ? 1.0f / std::sqrt(static_cast<float>(in_features_)) : 0.0f;
    if (bound > 0.0f) {
      init::uniform_(bias_, -bound, bound);
    } else {
      bias_.zero_();
    }
  }
}

Tensor Linear::forward(const Tensor& input) {
  return linear(input, weight_, bias_);
}

std::shared_ptr<Module> Linear::clone() const {
  auto copy = std::make_shared<Linear>(in_features_, out_features_, bias_.defined(), device());
  copy_state_into(*copy);
  return copy;
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features_, out_features_,
                     bias_.defined());
}

}  // namespace kdp::nn
