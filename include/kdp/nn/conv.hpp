#pragma once
/// \file
/// Conv2d (and Conv1d, Conv3d): PyTorch's 2-d convolution layer on NCHW tensors, with its argument
/// order, defaults, weight shape [out, in / groups, kh, kw], state-dict keys
/// (weight, bias) and initialisation (Kaiming-uniform with a = sqrt(5): weight
/// and bias from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups x kh
/// x kw), so that weights move between the two as they are.

#include "kdp/nn/module.hpp"
#include "kdp/ops/size2.hpp"

namespace kdp::nn {

/// torch.nn.Conv2d.
class Conv2d : public Module {
 public:
  /// Throws ValueError for sizes that do not divide into the groups, and when
  /// the parameters cannot fit in `device`'s memory.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1,
         Size2 padding = 0, Size2 dilation = 1, int64_t groups = 1, bool bias = true,
         const Device& device = get_default_device());

  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  /// Draws new weights (and bias) from the device's generator.
  void reset_parameters();
  /// The bytes of the weight and bias of such a layer, checked for overflow.
  static size_t parameter_bytes(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                int64_t groups, bool bias);

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  Size2 kernel_size() const { return kernel_; }
  Size2 stride() const { return stride_; }
  Size2 padding() const { return padding_; }
  Size2 dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t in_, out_;
  Size2 kernel_, stride_, padding_, dilation_;
  int64_t groups_;
  Tensor weight_, bias_;
};

/// torch.nn.Conv1d over [N, C, L] signals: weight [out, in / groups, k] (with
/// PyTorch's initialisation), on Conv2d's path (kdp::conv1d).
class Conv1d : public Module {
 public:
  /// Throws ValueError as Conv2d's constructor does.
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1, bool bias = true,
         const Device& device = get_default_device());

  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;
  void reset_parameters();

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int64_t kernel_size() const { return kernel_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t in_, out_, kernel_, stride_, padding_, dilation_, groups_;
  Tensor weight_, bias_;
};

/// torch.nn.Conv3d over [N, C, D, H, W] volumes: weight [out, in / groups,
/// kd, kh, kw] (with PyTorch's initialisation), on Conv2d's path (kdp::conv3d).
class Conv3d : public Module {
 public:
  /// Throws ValueError as Conv2d's constructor does.
  Conv3d(int64_t in_channels, int64_t out_channels, Size3 kernel_size, Size3 stride = 1,
         Size3 padding = 0, Size3 dilation = 1, int64_t groups = 1, bool bias = true,
         const Device& device = get_default_device());

  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;
  void reset_parameters();
  /// The bytes of the weight and bias of such a layer, checked for overflow.
  static size_t parameter_bytes(int64_t in_channels, int64_t out_channels, Size3 kernel_size,
                                int64_t groups, bool bias);

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  Size3 kernel_size() const { return kernel_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t in_, out_;
  Size3 kernel_, stride_, padding_, dilation_;
  int64_t groups_;
  Tensor weight_, bias_;
};

}  // namespace kdp::nn
