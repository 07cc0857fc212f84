#pragma once
/// \file
/// Pooling layers with PyTorch's names and defaults: the max and average
/// pools in 1, 2 and 3 dimensions (one family, PoolNd; the stride defaults to
/// the kernel size) and AdaptiveAvgPool2d (1 gives global average pooling).
/// They hold no parameters.

#include <optional>
#include <type_traits>

#include "kdp/nn/module.hpp"
#include "kdp/ops/size2.hpp"

namespace kdp::nn {

/// Which reduction a pool takes over each window.
enum class PoolKind {
  Max,  ///< the largest value (ties to the first, NaN wins), padding as -infinity
  Avg,  ///< the mean, with or without the padding's zeros in the divisor
};

/// torch.nn.MaxPool1d/2d/3d (Kind Max) and AvgPool1d/2d/3d (Kind Avg) over
/// [N, C, L], NCHW and [N, C, D, H, W] tensors: PyTorch's arguments and
/// defaults (the stride is the kernel size unless given); no parameters.
template <int N, PoolKind Kind>
class PoolNd : public Module {
 public:
  using Size = typename SpatialSize<N>::type;

  /// A max pool: torch.nn.MaxPoolNd(kernel_size, stride, padding, dilation,
  /// ceil_mode).
  template <PoolKind K = Kind, std::enable_if_t<K == PoolKind::Max, int> = 0>
  explicit PoolNd(Size kernel_size, std::optional<Size> stride = {}, Size padding = 0,
                  Size dilation = 1, bool ceil_mode = false)
      : PoolNd(kernel_size, stride, padding, dilation, ceil_mode, true) {}
  /// An average pool: torch.nn.AvgPoolNd(kernel_size, stride, padding,
  /// ceil_mode, count_include_pad).
  template <PoolKind K = Kind, std::enable_if_t<K == PoolKind::Avg, int> = 0>
  explicit PoolNd(Size kernel_size, std::optional<Size> stride = {}, Size padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true)
      : PoolNd(kernel_size, stride, padding, Size(1), ceil_mode, count_include_pad) {}

  Tensor forward(const Tensor& input) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

 private:
  PoolNd(Size kernel, std::optional<Size> stride, Size padding, Size dilation, bool ceil_mode,
         bool count_include_pad);

  Size kernel_, stride_, padding_, dilation_;
  bool ceil_mode_, count_include_pad_;
};

/// torch.nn.MaxPool1d over [N, C, L].
using MaxPool1d = PoolNd<1, PoolKind::Max>;
/// torch.nn.MaxPool2d.
using MaxPool2d = PoolNd<2, PoolKind::Max>;
/// torch.nn.MaxPool3d over [N, C, D, H, W].
using MaxPool3d = PoolNd<3, PoolKind::Max>;
/// torch.nn.AvgPool1d over [N, C, L].
using AvgPool1d = PoolNd<1, PoolKind::Avg>;
/// torch.nn.AvgPool2d.
using AvgPool2d = PoolNd<2, PoolKind::Avg>;
/// torch.nn.AvgPool3d over [N, C, D, H, W].
using AvgPool3d = PoolNd<3, PoolKind::Avg>;

extern template class PoolNd<1, PoolKind::Max>;
extern template class PoolNd<2, PoolKind::Max>;
extern template class PoolNd<3, PoolKind::Max>;
extern template class PoolNd<1, PoolKind::Avg>;
extern template class PoolNd<2, PoolKind::Avg>;
extern template class PoolNd<3, PoolKind::Avg>;

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

}  // namespace kdp::nn
