#include "kdp/nn/conv.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/init.hpp"
#include "kdp/nn/parameter_memory.hpp"
#include "kdp/ops/conv.hpp"

namespace kdp::nn {

namespace {
std::string describe(int64_t in, int64_t out, Size2 k) {
  return fmt::format("Conv2d({}, {}, kernel_size={})", in, out, k.str());
}

// PyTorch's initialisation of a convolution: kaiming_uniform_(a = sqrt(5))
// weights, a bias uniform in +-1 / sqrt(fan_in).
void init_convolution(Tensor& weight, Tensor& bias, int64_t fan_in) {
  NoGradGuard no_grad;
  init::kaiming_uniform_(weight, std::sqrt(5.0f));
  if (bias.defined()) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

size_t Conv2d::parameter_bytes(int64_t in, int64_t out, Size2 k, int64_t groups, bool bias) {
  const std::string what = "kdp::nn::" + describe(in, out, k);
  KDP_CHECK_FOR(what,
                in >= 1 && out >= 1 && k.h >= 1 && k.w >= 1 && groups >= 1 && in % groups == 0 &&
                    out % groups == 0,
                ValueError,
                "channels and kernel must be >= 1, and in_channels {} and out_channels {} "
                "divisible by groups {}",
                in, out, groups);
  const int64_t weights = checked_numel({out, in / groups, k.h, k.w}, sizeof(float), what);
  return checked_bytes(weights + (bias ? out : 0), sizeof(float), what);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride,
               Size2 padding, Size2 dilation, int64_t groups, bool bias, const Device& device)
    : Module("Conv2d"),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      dilation_(dilation),
      groups_(groups) {
  const std::string what = describe(in_, out_, kernel_);
  check_parameters_fit({{"", what, parameter_bytes(in_, out_, kernel_, groups_, bias)}}, device,
                       "kdp::nn::" + what);
  KDP_CHECK_FOR("kdp::nn::" + what,
                stride.h >= 1 && stride.w >= 1 && dilation.h >= 1 && dilation.w >= 1 &&
                    padding.h >= 0 && padding.w >= 0,
                ValueError, "stride {} and dilation {} must be >= 1, padding {} >= 0", stride.str(),
                dilation.str(), padding.str());
  weight_ = register_parameter(
      "weight", Tensor::empty_labeled({out_, in_ / groups_, kernel_.h, kernel_.w}, device,
                                      "kdp::Conv2d::weight"));
  if (bias) {
    bias_ = register_parameter("bias", Tensor::empty_labeled({out_}, device, "kdp::Conv2d::bias"));
  }
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init_convolution(weight_, bias_, in_ / groups_ * kernel_.h * kernel_.w);
}

Tensor Conv2d::forward(const Tensor& input) {
  return conv2d(input, weight_, bias_, stride_, padding_, dilation_, groups_);
}

std::shared_ptr<Module> Conv2d::clone() const {
  auto copy = std::make_shared<Conv2d>(in_, out_, kernel_, stride_, padding_, dilation_, groups_,
                                       bias_.defined(), device());
  copy_state_into(*copy);
  copy->train(is_training());
  return copy;
}

std::string Conv2d::extra_repr() const {
  std::string s =
      fmt::format("{}, {}, kernel_size={}, stride={}", in_, out_, kernel_.str(), stride_.str());
  if (padding_ != Size2(0)) s += fmt::format(", padding={}", padding_.str());
  if (dilation_ != Size2(1)) s += fmt::format(", dilation={}", dilation_.str());
  if (groups_ != 1) s += fmt::format(", groups={}", groups_);
  if (!bias_.defined()) s += ", bias=false";
  return s;
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
               int64_t padding, int64_t dilation, int64_t groups, bool bias, const Device& device)
    : Module("Conv1d"),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      dilation_(dilation),
      groups_(groups) {
  const std::string what = fmt::format("Conv1d({}, {}, kernel_size={})", in_, out_, kernel_);
  check_parameters_fit(
      {{"", what, Conv2d::parameter_bytes(in_, out_, Size2(1, kernel_), groups_, bias)}}, device,
      "kdp::nn::" + what);
  KDP_CHECK_FOR("kdp::nn::" + what, stride >= 1 && dilation >= 1 && padding >= 0, ValueError,
                "stride {} and dilation {} must be >= 1, padding {} >= 0", stride, dilation,
                padding);
  weight_ = register_parameter("weight", Tensor::empty_labeled({out_, in_ / groups_, kernel_},
                                                               device, "kdp::Conv1d::weight"));
  if (bias) {
    bias_ = register_parameter("bias", Tensor::empty_labeled({out_}, device, "kdp::Conv1d::bias"));
  }
  reset_parameters();
}

void Conv1d::reset_parameters() {
  init_convolution(weight_, bias_, in_ / groups_ * kernel_);
}

Tensor Conv1d::forward(const Tensor& input) {
  return conv1d(input, weight_, bias_, stride_, padding_, dilation_, groups_);
}

std::shared_ptr<Module> Conv1d::clone() const {
  auto copy = std::make_shared<Conv1d>(in_, out_, kernel_, stride_, padding_, dilation_, groups_,
                                       bias_.defined(), device());
  copy_state_into(*copy);
  copy->train(is_training());
  return copy;
}

std::string Conv1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_, out_, kernel_, stride_);
  if (padding_ != 0) s += fmt::format(", padding={}", padding_);
  if (dilation_ != 1) s += fmt::format(", dilation={}", dilation_);
  if (groups_ != 1) s += fmt::format(", groups={}", groups_);
  if (!bias_.defined()) s += ", bias=false";
  return s;
}

size_t Conv3d::parameter_bytes(int64_t in, int64_t out, Size3 k, int64_t groups, bool bias) {
  const std::string what = fmt::format("kdp::nn::Conv3d({}, {}, kernel_size={})", in, out, k.str());
  KDP_CHECK_FOR(what,
                in >= 1 && out >= 1 && k.d >= 1 && k.h >= 1 && k.w >= 1 && groups >= 1 &&
                    in % groups == 0 && out % groups == 0,
                ValueError,
                "channels and kernel must be >= 1, and in_channels {} and out_channels {} "
                "divisible by groups {}",
                in, out, groups);
  const int64_t weights = checked_numel({out, in / groups, k.d, k.h, k.w}, sizeof(float), what);
  return checked_bytes(weights + (bias ? out : 0), sizeof(float), what);
}

Conv3d::Conv3d(int64_t in_channels, int64_t out_channels, Size3 kernel_size, Size3 stride,
               Size3 padding, Size3 dilation, int64_t groups, bool bias, const Device& device)
    : Module("Conv3d"),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      dilation_(dilation),
      groups_(groups) {
  const std::string what = fmt::format("Conv3d({}, {}, kernel_size={})", in_, out_, kernel_.str());
  check_parameters_fit({{"", what, parameter_bytes(in_, out_, kernel_, groups_, bias)}}, device,
                       "kdp::nn::" + what);
  KDP_CHECK_FOR("kdp::nn::" + what,
                stride.d >= 1 && stride.h >= 1 && stride.w >= 1 && dilation.d >= 1 &&
                    dilation.h >= 1 && dilation.w >= 1 && padding.d >= 0 && padding.h >= 0 &&
                    padding.w >= 0,
                ValueError, "stride {} and dilation {} must be >= 1, padding {} >= 0", stride.str(),
                dilation.str(), padding.str());
  weight_ = register_parameter(
      "weight", Tensor::empty_labeled({out_, in_ / groups_, kernel_.d, kernel_.h, kernel_.w},
                                      device, "kdp::Conv3d::weight"));
  if (bias) {
    bias_ = register_parameter("bias", Tensor::empty_labeled({out_}, device, "kdp::Conv3d::bias"));
  }
  reset_parameters();
}

void Conv3d::reset_parameters() {
  init_convolution(weight_, bias_, in_ / groups_ * kernel_.d * kernel_.h * kernel_.w);
}

Tensor Conv3d::forward(const Tensor& input) {
  return conv3d(input, weight_, bias_, stride_, padding_, dilation_, groups_);
}

std::shared_ptr<Module> Conv3d::clone() const {
  auto copy = std::make_shared<Conv3d>(in_, out_, kernel_, stride_, padding_, dilation_, groups_,
                                       bias_.defined(), device());
  copy_state_into(*copy);
  copy->train(is_training());
  return copy;
}

std::string Conv3d::extra_repr() const {
  std::string s =
      fmt::format("{}, {}, kernel_size={}, stride={}", in_, out_, kernel_.str(), stride_.str());
  if (padding_ != Size3(0)) s += fmt::format(", padding={}", padding_.str());
  if (dilation_ != Size3(1)) s += fmt::format(", dilation={}", dilation_.str());
  if (groups_ != 1) s += fmt::format(", groups={}", groups_);
  if (!bias_.defined()) s += ", bias=false";
  return s;
}

}  // namespace kdp::nn
