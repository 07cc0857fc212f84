#pragma once
// The one description of a convolution that its paths share: kdp's im2col and
// GEMM (ops/conv.cpp) and oneDNN's primitives (kernels/vendor/onednn.cpp).

#include <cstdint>

#include "kdp/core/shape.hpp"

namespace kdp::detail {

// The sizes of one convolution: input [n, c, h, w], weight [o, c / groups, kh,
// kw], output [n, o, oh, ow]; for volumes (conv3d) input [n, c, d, h, w],
// weight [o, c / groups, kd, kh, kw], output [n, o, od, oh, ow]. An image is
// a volume of depth 1 under a kernel of depth 1, so one path serves both.
// Strides, padding and dilation as PyTorch has them (dilation 1: none).
struct ConvGeometry {
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t oh, ow;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups;
  int64_t d = 1, kd = 1, od = 1, sd = 1, pd = 0, dd = 1;
  bool volume = false;  // whether the tensors have a depth dimension

  int64_t out_plane() const { return od * oh * ow; }                // outputs per channel
  int64_t in_image() const { return c * d * h * w; }                // inputs per sample
  int64_t columns() const { return n * out_plane(); }               // of the im2col matrix
  int64_t group_rows() const { return c / groups * kd * kh * kw; }  // its rows per group
  int64_t group_out() const { return o / groups; }
  int64_t rows() const { return c * kd * kh * kw; }
  Shape input_shape() const { return volume ? Shape{n, c, d, h, w} : Shape{n, c, h, w}; }
  Shape weight_shape() const {
    return volume ? Shape{o, c / groups, kd, kh, kw} : Shape{o, c / groups, kh, kw};
  }
  Shape output_shape() const { return volume ? Shape{n, o, od, oh, ow} : Shape{n, o, oh, ow}; }
};

}  // namespace kdp::detail
