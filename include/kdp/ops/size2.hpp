#pragma once
/// \file
/// Size2: a height and a width, as PyTorch's `int or (int, int)` arguments of
/// the 2-d layers (kernel_size, stride, padding, dilation): `3` is {3, 3};
/// Size3 the same for the 3-d layers: a depth, a height and a width.

#include <cstdint>
#include <string>

namespace kdp {

/// A height and a width; one number stands for both.
struct Size2 {
  int64_t h = 0;
  int64_t w = 0;
  Size2() = default;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: 3 means (3, 3), as in PyTorch
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  bool operator==(const Size2& o) const { return h == o.h && w == o.w; }
  bool operator!=(const Size2& o) const { return !(*this == o); }
  /// "3" when square, else "(3, 5)".
  std::string str() const;
};

/// A depth, a height and a width; one number stands for all three.
struct Size3 {
  int64_t d = 0;
  int64_t h = 0;
  int64_t w = 0;
  Size3() = default;
  Size3(int64_t all) : d(all), h(all), w(all) {}  // NOLINT: 3 means (3, 3, 3), as in PyTorch
  Size3(int64_t depth, int64_t height, int64_t width) : d(depth), h(height), w(width) {}
  bool operator==(const Size3& o) const { return d == o.d && h == o.h && w == o.w; }
  bool operator!=(const Size3& o) const { return !(*this == o); }
  /// "3" when all three are equal, else "(1, 3, 3)".
  std::string str() const;
};

/// The size of an N-d layer's window along its spatial dimensions: a number
/// in 1-d, Size2 (h, w) in 2-d, Size3 (d, h, w) in 3-d; a number n means n
/// along every dimension, as in PyTorch (nn::ConvNd, nn::PoolNd).
template <int N>
struct SpatialSize;
/// 1-d: one number.
template <>
struct SpatialSize<1> {
  using type = int64_t;
};
/// 2-d: (h, w).
template <>
struct SpatialSize<2> {
  using type = Size2;
};
/// 3-d: (d, h, w).
template <>
struct SpatialSize<3> {
  using type = Size3;
};

/// The output length of a sliding window: floor((in + 2 pad - dilation (k - 1)
/// - 1) / stride) + 1, as PyTorch's convolutions and pooling compute it; 0
/// when the window does not fit. With `ceil_mode` the division rounds up, but
/// a last window must start inside the input or its left padding.
int64_t window_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                           int64_t dilation = 1, bool ceil_mode = false);

}  // namespace kdp
