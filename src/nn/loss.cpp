#include "kdp/nn/loss.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::nn {

Tensor Loss::forward(const TensorList& inputs) {
  KDP_CHECK_FOR(type_name(), inputs.size() == 2, ValueError,
                "takes (output, target), got {} tensors", inputs.size());
  return forward(inputs[0], inputs[1]);
}

Tensor MSELoss::forward(const Tensor& output, const Tensor& target) {
  return mse_loss(output, target, reduction());
}

Tensor L1Loss::forward(const Tensor& output, const Tensor& target) {
  return l1_loss(output, target, reduction());
}

Tensor SmoothL1Loss::forward(const Tensor& output, const Tensor& target) {
  return smooth_l1_loss(output, target, reduction(), beta_);
}

Tensor HuberLoss::forward(const Tensor& output, const Tensor& target) {
  return huber_loss(output, target, reduction(), delta_);
}

Tensor CrossEntropyLoss::forward(const Tensor& output, const Tensor& target) {
  return cross_entropy(output, target, options_);
}

Tensor NLLLoss::forward(const Tensor& output, const Tensor& target) {
  return nll_loss(output, target, options_);
}

}  // namespace kdp::nn
