#pragma once
/// \file
/// 2-d convolution on NCHW tensors (and 1-d on NCL ones through it), as torch.nn.functional.conv2d:
/// weight [out, in / groups, kh, kw], optional bias [out], stride, padding, dilation and groups;
/// 3-d convolution on NCDHW volumes on the same path (vol2col: im2col with a depth).
/// Forward and backward run through the BLAS (im2col and one GEMM per group over the whole batch;
/// col2im for the input's gradient), so a convolution runs on every backend, on the instance of its
/// device.

#include "kdp/core/tensor.hpp"
#include "kdp/ops/size2.hpp"

namespace kdp {

/// y[n, o] = bias[o] + sum over c in o's group and the kernel window of
/// weight[o, c, i, j] x[n, c, y s + i d - p, x s + j d - p] (zero outside).
/// Shapes that do not fit are a ShapeError naming both.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              Size2 stride = 1, Size2 padding = 0, Size2 dilation = 1, int64_t groups = 1);

/// relu(conv2d(...)) in one pass over the output, forward and backward (what
/// Sequential runs for a Conv2d followed by a ReLU).
Tensor conv2d_relu(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                   Size2 stride = 1, Size2 padding = 0, Size2 dilation = 1, int64_t groups = 1);

/// 1-d convolution of [N, C, L] signals, as torch.nn.functional.conv1d:
/// weight [out, in / groups, k]. It runs as conv2d on [N, C, 1, L] (views,
/// no copy), forward and backward.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

/// 3-d convolution of [N, C, D, H, W] volumes, as torch.nn.functional.conv3d:
/// weight [out, in / groups, kd, kh, kw], y[n, o, z, y, x] = bias[o] + the sum
/// over its group's channels and the kernel of weight[o, c, a, i, j]
/// x[n, c, z sd + a dd - pd, y sh + i dh - ph, x sw + j dw - pw] (zero outside).
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
              Size3 stride = 1, Size3 padding = 0, Size3 dilation = 1, int64_t groups = 1);

}  // namespace kdp
