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
#include "nn/spatial_size.hpp"

namespace kdp::nn {

namespace {

using detail::all_at_least;
using detail::dims_of;
using detail::str_of;

// "Conv2d(1, 32, kernel_size=3)": the layer in errors.
template <int N>
std::string describe(int64_t in, int64_t out, const typename ConvNd<N>::Size& k) {
  return fmt::format("Conv{}d({}, {}, kernel_size={})", N, in, out, str_of(k));
}

// The functional form of the N-d convolution.
template <int N>
Tensor convolve(const Tensor& x, const Tensor& w, const Tensor& b,
                const typename ConvNd<N>::Size& stride, const typename ConvNd<N>::Size& padding,
                const typename ConvNd<N>::Size& dilation, int64_t groups) {
  if constexpr (N == 1) {
    return conv1d(x, w, b, stride, padding, dilation, groups);
  } else if constexpr (N == 2) {
    return conv2d(x, w, b, stride, padding, dilation, groups);
  } else {
    return conv3d(x, w, b, stride, padding, dilation, groups);
  }
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

// The shape of a convolution's weight: [out, in / groups, kernel...].
std::vector<int64_t> weight_shape(int64_t in, int64_t out, int64_t groups,
                                  const std::vector<int64_t>& kernel) {
  std::vector<int64_t> dims{out, in / groups};
  dims.insert(dims.end(), kernel.begin(), kernel.end());
  return dims;
}

// The bytes of a convolution's weight and bias, checked for overflow; `what`
// names the layer in errors.
size_t convolution_bytes(const std::string& what, int64_t in, int64_t out,
                         const std::vector<int64_t>& kernel, int64_t groups, bool bias) {
  const bool sizes = std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k >= 1; });
  KDP_CHECK_FOR(
      what, in >= 1 && out >= 1 && sizes && groups >= 1 && in % groups == 0 && out % groups == 0,
      ValueError,
      "channels and kernel must be >= 1, and in_channels {} and out_channels {} "
      "divisible by groups {}",
      in, out, groups);
  const int64_t weights = checked_numel(weight_shape(in, out, groups, kernel), sizeof(float), what);
  return checked_bytes(weights + (bias ? out : 0), sizeof(float), what);
}

}  // namespace

template <int N>
size_t ConvNd<N>::parameter_bytes(int64_t in, int64_t out, Size k, int64_t groups, bool bias) {
  return convolution_bytes(KDP_ORIGIN_NAMED(describe<N>(in, out, k)), in, out, dims_of(k), groups,
                           bias);
}

template <int N>
ConvNd<N>::ConvNd(int64_t in_channels, int64_t out_channels, Size kernel_size, Size stride,
                  Size padding, Size dilation, int64_t groups, bool bias, const Device& device)
    : Module(fmt::format("Conv{}d", N)),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      dilation_(dilation),
      groups_(groups) {
  const std::string what = describe<N>(in_, out_, kernel_);
  check_parameters_fit({{"", what, parameter_bytes(in_, out_, kernel_, groups_, bias)}}, device,
                       KDP_ORIGIN_NAMED(what));
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(what),
                all_at_least(stride, 1) && all_at_least(dilation, 1) && all_at_least(padding, 0),
                ValueError, "stride {} and dilation {} must be >= 1, padding {} >= 0",
                str_of(stride), str_of(dilation), str_of(padding));
  const std::string label = fmt::format("kdp::Conv{}d::", N);
  weight_ = register_parameter(
      "weight", Tensor::empty_labeled(Shape(weight_shape(in_, out_, groups_, dims_of(kernel_))),
                                      device, label + "weight"));
  if (bias)
    bias_ = register_parameter("bias", Tensor::empty_labeled({out_}, device, label + "bias"));
  reset_parameters();
}

template <int N>
void ConvNd<N>::reset_parameters() {
  int64_t fan_in = in_ / groups_;
  for (int64_t k : dims_of(kernel_)) fan_in *= k;
  init_convolution(weight_, bias_, fan_in);
}

template <int N>
Tensor ConvNd<N>::forward(const Tensor& input) {
  return convolve<N>(input, weight_, bias_, stride_, padding_, dilation_, groups_);
}

template <int N>
std::shared_ptr<Module> ConvNd<N>::clone() const {
  auto copy = std::make_shared<ConvNd<N>>(in_, out_, kernel_, stride_, padding_, dilation_, groups_,
                                          bias_.defined(), device());
  copy_state_into(*copy);
  copy->train(is_training());
  return copy;
}

template <int N>
std::string ConvNd<N>::extra_repr() const {
  std::string s =
      fmt::format("{}, {}, kernel_size={}, stride={}", in_, out_, str_of(kernel_), str_of(stride_));
  if (padding_ != Size(0)) s += fmt::format(", padding={}", str_of(padding_));
  if (dilation_ != Size(1)) s += fmt::format(", dilation={}", str_of(dilation_));
  if (groups_ != 1) s += fmt::format(", groups={}", groups_);
  if (!bias_.defined()) s += ", bias=false";
  return s;
}

template class ConvNd<1>;
template class ConvNd<2>;
template class ConvNd<3>;

}  // namespace kdp::nn
