#include "kdp/nn/pooling.hpp"

#include <fmt/format.h>

#include "kdp/ops/pooling.hpp"

namespace kdp::nn {

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation,
                     bool ceil_mode)
    : Module("MaxPool2d"),
      kernel_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      dilation_(dilation),
      ceil_mode_(ceil_mode) {}

Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool2d(input, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::shared_ptr<Module> MaxPool2d::clone() const {
  return std::make_shared<MaxPool2d>(kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}",
                     kernel_.str(), stride_.str(), padding_.str(), dilation_.str(), ceil_mode_);
}

AvgPool2d::AvgPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool ceil_mode,
                     bool count_include_pad)
    : Module("AvgPool2d"),
      kernel_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      ceil_mode_(ceil_mode),
      count_include_pad_(count_include_pad) {}

Tensor AvgPool2d::forward(const Tensor& input) {
  return avg_pool2d(input, kernel_, stride_, padding_, ceil_mode_, count_include_pad_);
}

std::shared_ptr<Module> AvgPool2d::clone() const {
  return std::make_shared<AvgPool2d>(kernel_, stride_, padding_, ceil_mode_, count_include_pad_);
}

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", kernel_.str(), stride_.str(),
                     padding_.str());
}

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

MaxPool1d::MaxPool1d(int64_t kernel_size, std::optional<int64_t> stride)
    : Module("MaxPool1d"), kernel_(kernel_size), stride_(stride.value_or(kernel_size)) {}

Tensor MaxPool1d::forward(const Tensor& input) {
  return max_pool1d(input, kernel_, stride_);
}

std::shared_ptr<Module> MaxPool1d::clone() const {
  return std::make_shared<MaxPool1d>(kernel_, stride_);
}

std::string MaxPool1d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}", kernel_, stride_);
}

AvgPool1d::AvgPool1d(int64_t kernel_size, std::optional<int64_t> stride)
    : Module("AvgPool1d"), kernel_(kernel_size), stride_(stride.value_or(kernel_size)) {}

Tensor AvgPool1d::forward(const Tensor& input) {
  return avg_pool1d(input, kernel_, stride_);
}

std::shared_ptr<Module> AvgPool1d::clone() const {
  return std::make_shared<AvgPool1d>(kernel_, stride_);
}

std::string AvgPool1d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}", kernel_, stride_);
}

MaxPool3d::MaxPool3d(Size3 kernel_size, std::optional<Size3> stride, Size3 padding, Size3 dilation,
                     bool ceil_mode)
    : Module("MaxPool3d"),
      kernel_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      dilation_(dilation),
      ceil_mode_(ceil_mode) {}

Tensor MaxPool3d::forward(const Tensor& input) {
  return max_pool3d(input, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::shared_ptr<Module> MaxPool3d::clone() const {
  return std::make_shared<MaxPool3d>(kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::string MaxPool3d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}",
                     kernel_.str(), stride_.str(), padding_.str(), dilation_.str(), ceil_mode_);
}

AvgPool3d::AvgPool3d(Size3 kernel_size, std::optional<Size3> stride, Size3 padding, bool ceil_mode,
                     bool count_include_pad)
    : Module("AvgPool3d"),
      kernel_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      ceil_mode_(ceil_mode),
      count_include_pad_(count_include_pad) {}

Tensor AvgPool3d::forward(const Tensor& input) {
  return avg_pool3d(input, kernel_, stride_, padding_, ceil_mode_, count_include_pad_);
}

std::shared_ptr<Module> AvgPool3d::clone() const {
  return std::make_shared<AvgPool3d>(kernel_, stride_, padding_, ceil_mode_, count_include_pad_);
}

std::string AvgPool3d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", kernel_.str(), stride_.str(),
                     padding_.str());
}

}  // namespace kdp::nn
