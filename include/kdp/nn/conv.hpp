#pragma once
/// \file
/// Conv1d, Conv2d and Conv3d: PyTorch's convolution layers on [N, C, L],
/// NCHW and [N, C, D, H, W] tensors, one family (ConvNd<N>) with PyTorch's
/// argument order, defaults, weight shape [out, in / groups, kernel...],
/// state-dict keys (weight, bias) and initialisation (Kaiming-uniform with a =
/// sqrt(5): weight and bias from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in =
/// in / groups x the kernel's elements), so that weights move between the two
/// as they are.

#include <cstdint>
#include <vector>

#include "kdp/nn/module.hpp"
#include "kdp/ops/size2.hpp"

namespace kdp::nn {

/// torch.nn.Conv1d, Conv2d and Conv3d (N = 1, 2, 3); the 1-d and 3-d forms
/// run on the 2-d path (kdp::conv1d, kdp::conv3d).
template <int N>
class ConvNd : public Module {
 public:
  using Size = typename SpatialSize<N>::type;

  /// Throws ValueError for sizes that do not divide into the groups, and when
  /// the parameters cannot fit in `device`'s memory.
  ConvNd(int64_t in_channels, int64_t out_channels, Size kernel_size, Size stride = 1,
         Size padding = 0, Size dilation = 1, int64_t groups = 1, bool bias = true,
         const Device& device = get_default_device());

  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  /// Draws new weights (and bias) from the device's generator.
  void reset_parameters();
  /// The bytes of the weight and bias of such a layer, checked for overflow.
  static size_t parameter_bytes(int64_t in_channels, int64_t out_channels, Size kernel_size,
                                int64_t groups, bool bias);

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  Size kernel_size() const { return kernel_; }
  Size stride() const { return stride_; }
  Size padding() const { return padding_; }
  Size dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t in_, out_;
  Size kernel_, stride_, padding_, dilation_;
  int64_t groups_;
  Tensor weight_, bias_;
};

/// torch.nn.Conv1d over [N, C, L] signals: weight [out, in / groups, k].
using Conv1d = ConvNd<1>;
/// torch.nn.Conv2d over NCHW images: weight [out, in / groups, kh, kw].
using Conv2d = ConvNd<2>;
/// torch.nn.Conv3d over [N, C, D, H, W] volumes: weight [out, in / groups,
/// kd, kh, kw].
using Conv3d = ConvNd<3>;

extern template class ConvNd<1>;
extern template class ConvNd<2>;
extern template class ConvNd<3>;

}  // namespace kdp::nn
