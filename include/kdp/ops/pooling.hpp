#pragma once
/// \file
/// 2-d pooling on NCHW tensors, as torch.nn.functional's max_pool2d,
/// avg_pool2d and adaptive_avg_pool2d (any output size; 1x1 is global average
/// pooling), and their 1-d and 3-d forms. The stride defaults to the kernel
/// size; a window never starts in the right or bottom padding.

#include <optional>

#include "kdp/core/tensor.hpp"
#include "kdp/ops/size2.hpp"

namespace kdp {

/// The largest value of each window; its position is kept for the backward,
/// which sends each output's gradient to it. Ties go to the first position in
/// the window (row by row); a NaN in a window is its maximum, as in PyTorch.
/// Padding counts as -infinity.
Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = {},
                  Size2 padding = 0, Size2 dilation = 1, bool ceil_mode = false);

/// The mean of each window. With `count_include_pad` (PyTorch's default) the
/// padding's zeros count in the divisor; otherwise only the input's elements.
Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = {},
                  Size2 padding = 0, bool ceil_mode = false, bool count_include_pad = true);

/// The mean of each of output_size.h x output_size.w regions: region i spans
/// [floor(i H / oh), ceil((i + 1) H / oh)), as in PyTorch.
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);

/// max_pool2d and avg_pool2d of [N, C, L] signals over windows of `kernel_size`
/// along L (stride: the kernel size by default), as torch's 1-d pools: the
/// same rules for ties, NaN, padding, ceil_mode and the divisor.
Tensor max_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride = {},
                  int64_t padding = 0, int64_t dilation = 1, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride = {},
                  int64_t padding = 0, bool ceil_mode = false, bool count_include_pad = true);

/// max_pool2d and avg_pool2d over the boxes of [N, C, D, H, W] (or [C, D, H,
/// W]) volumes, as torch's 3-d pools: the same rules for ties, NaN, padding,
/// ceil_mode and the divisor, along three dimensions.
Tensor max_pool3d(const Tensor& input, Size3 kernel_size, std::optional<Size3> stride = {},
                  Size3 padding = 0, Size3 dilation = 1, bool ceil_mode = false);
Tensor avg_pool3d(const Tensor& input, Size3 kernel_size, std::optional<Size3> stride = {},
                  Size3 padding = 0, bool ceil_mode = false, bool count_include_pad = true);

}  // namespace kdp
