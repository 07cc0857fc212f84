#include "kdp/nn/pooling.hpp"

#include <fmt/format.h>

#include "kdp/ops/pooling.hpp"
#include "nn/spatial_size.hpp"

namespace kdp::nn {

namespace {

using detail::str_of;

// The functional form of the N-d pool.
template <int N, PoolKind Kind, class Size>
Tensor pool(const Tensor& x, const Size& kernel, const Size& stride, const Size& padding,
            const Size& dilation, bool ceil_mode, bool count_include_pad) {
  if constexpr (Kind == PoolKind::Max) {
    (void)count_include_pad;
    if constexpr (N == 1) return max_pool1d(x, kernel, stride, padding, dilation, ceil_mode);
    if constexpr (N == 2) return max_pool2d(x, kernel, stride, padding, dilation, ceil_mode);
    if constexpr (N == 3) return max_pool3d(x, kernel, stride, padding, dilation, ceil_mode);
  } else {
    (void)dilation;
    if constexpr (N == 1)
      return avg_pool1d(x, kernel, stride, padding, ceil_mode, count_include_pad);
    if constexpr (N == 2)
      return avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad);
    if constexpr (N == 3)
      return avg_pool3d(x, kernel, stride, padding, ceil_mode, count_include_pad);
  }
}

}  // namespace

template <int N, PoolKind Kind>
PoolNd<N, Kind>::PoolNd(Size kernel, std::optional<Size> stride, Size padding, Size dilation,
                        bool ceil_mode, bool count_include_pad)
    : Module(fmt::format("{}Pool{}d", Kind == PoolKind::Max ? "Max" : "Avg", N)),
      kernel_(kernel),
      stride_(stride.value_or(kernel)),
      padding_(padding),
      dilation_(dilation),
      ceil_mode_(ceil_mode),
      count_include_pad_(count_include_pad) {}

template <int N, PoolKind Kind>
Tensor PoolNd<N, Kind>::forward(const Tensor& input) {
  return pool<N, Kind>(input, kernel_, stride_, padding_, dilation_, ceil_mode_,
                       count_include_pad_);
}

template <int N, PoolKind Kind>
std::shared_ptr<Module> PoolNd<N, Kind>::clone() const {
  return std::shared_ptr<PoolNd>(
      new PoolNd(kernel_, stride_, padding_, dilation_, ceil_mode_, count_include_pad_));
}

template <int N, PoolKind Kind>
std::string PoolNd<N, Kind>::extra_repr() const {
  const std::string s = fmt::format("kernel_size={}, stride={}, padding={}", str_of(kernel_),
                                    str_of(stride_), str_of(padding_));
  if constexpr (Kind == PoolKind::Max) {
    return s + fmt::format(", dilation={}, ceil_mode={}", str_of(dilation_), ceil_mode_);
  }
  return s;
}

template class PoolNd<1, PoolKind::Max>;
template class PoolNd<2, PoolKind::Max>;
template class PoolNd<3, PoolKind::Max>;
template class PoolNd<1, PoolKind::Avg>;
template class PoolNd<2, PoolKind::Avg>;
template class PoolNd<3, PoolKind::Avg>;

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size)
    : Module("AdaptiveAvgPool2d"), output_size_(output_size) {}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return adaptive_avg_pool2d(input, output_size_);
}

std::shared_ptr<Module> AdaptiveAvgPool2d::clone() const {
  return std::make_shared<AdaptiveAvgPool2d>(output_size_);
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return fmt::format("output_size={}", output_size_.str());
}

}  // namespace kdp::nn
