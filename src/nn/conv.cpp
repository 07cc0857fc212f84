#include "kdp/nn/conv.hpp"

#include <fmt/format.h>

#include <algorithm>
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
// The bytes of a convolution's weight [out, in / groups, kernel...] and bias,
// checked for overflow; `what` names the layer in errors.
size_t convolution_bytes(const std::string& what, int64_t in, int64_t out,
                         const std::vector<int64_t>& kernel, int64_t groups, bool bias) {
  const bool sizes = std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k >= 1; });
  KDP_CHECK_FOR(
      what, in >= 1 && out >= 1 && sizes && groups >= 1 && in % groups == 0 && out % groups == 0,
      ValueError,
      "channels and kernel must be >= 1, and in_channels {} and out_channels {} "
      "divisible by groups {}",
      in, out, groups);
  std::vector<int64_t> dims{out, in / groups};
  dims.insert(dims.end(), kernel.begin(), kernel.end());
  const int64_t weights = checked_numel(dims, sizeof(float), what);
  return checked_bytes(weights + (bias ? out : 0), sizeof(float), what);
}

// What a convolution's repr adds after its stride: what differs from the
// defaults.
std::string repr_tail(bool padded, const std::string& padding, bool dilated,
                      const std::string& dilation, int64_t groups, bool bias) {
  std::string s;
  if (padded) s += fmt::format(", padding={}", padding);
  if (dilated) s += fmt::format(", dilation={}", dilation);
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias) s += ", bias=false";
  return s;
}
}  // namespace

size_t Conv2d::parameter_bytes(int64_t in, int64_t out, Size2 k, int64_t groups, bool bias) {
  return convolution_bytes("kdp::nn::" + describe(in, out, k), in, out, {k.h, k.w}, groups, bias);
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
                       KDP_ORIGIN_NAMED(what));
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(what),
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
  const std::string s =
      fmt::format("{}, {}, kernel_size={}, stride={}", in_, out_, kernel_.str(), stride_.str());
  return s + repr_tail(padding_ != Size2(0), padding_.str(), dilation_ != Size2(1), dilation_.str(),
                       groups_, bias_.defined());
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
      KDP_ORIGIN_NAMED(what));
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(what), stride >= 1 && dilation >= 1 && padding >= 0, ValueError,
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
  const std::string s =
      fmt::format("{}, {}, kernel_size={}, stride={}", in_, out_, kernel_, stride_);
  return s + repr_tail(padding_ != 0, std::to_string(padding_), dilation_ != 1,
                       std::to_string(dilation_), groups_, bias_.defined());
}

size_t Conv3d::parameter_bytes(int64_t in, int64_t out, Size3 k, int64_t groups, bool bias) {
  return convolution_bytes(fmt::format("kdp::nn::Conv3d({}, {}, kernel_size={})", in, out, k.str()),
                           in, out, {k.d, k.h, k.w}, groups, bias);
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
                       KDP_ORIGIN_NAMED(what));
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(what),
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
  const std::string s =
      fmt::format("{}, {}, kernel_size={}, stride={}", in_, out_, kernel_.str(), stride_.str());
  return s + repr_tail(padding_ != Size3(0), padding_.str(), dilation_ != Size3(1), dilation_.str(),
                       groups_, bias_.defined());
}

}  // namespace kdp::nn
