#pragma once
/// \file
/// Pooling layers with PyTorch's names and defaults: MaxPool2d, AvgPool2d
/// (the stride defaults to the kernel size) and AdaptiveAvgPool2d (1 gives
/// global average pooling), and the 1-d and 3-d max and average pools. They hold no parameters.

#include <optional>

#include "kdp/nn/module.hpp"
#include "kdp/ops/size2.hpp"

namespace kdp::nn {

/// torch.nn.MaxPool2d.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = {}, Size2 padding = 0,
                     Size2 dilation = 1, bool ceil_mode = false);
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// torch.nn.AvgPool2d.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = {}, Size2 padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true);
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
};

/// torch.nn.AdaptiveAvgPool2d.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  Size2 output_size_;
};

/// torch.nn.MaxPool1d over [N, C, L] (stride: the kernel size by default).
class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(int64_t kernel_size, std::optional<int64_t> stride = {});
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  int64_t kernel_, stride_;
};

/// torch.nn.AvgPool1d over [N, C, L] (stride: the kernel size by default).
class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(int64_t kernel_size, std::optional<int64_t> stride = {});
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  int64_t kernel_, stride_;
};

/// torch.nn.MaxPool3d over [N, C, D, H, W] (stride: the kernel size by default).
class MaxPool3d : public Module {
 public:
  explicit MaxPool3d(Size3 kernel_size, std::optional<Size3> stride = {}, Size3 padding = 0,
                     Size3 dilation = 1, bool ceil_mode = false);
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  Size3 kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// torch.nn.AvgPool3d over [N, C, D, H, W] (stride: the kernel size by default).
class AvgPool3d : public Module {
 public:
  explicit AvgPool3d(Size3 kernel_size, std::optional<Size3> stride = {}, Size3 padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true);
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  Size3 kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
};

}  // namespace kdp::nn
