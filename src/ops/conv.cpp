#include "kdp/ops/conv.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/check.hpp"
#include "kdp/core/trace.hpp"
#include "kernels/conv_geometry.hpp"
#include "kernels/gemm.hpp"
#include "kernels/native/host_kernels.hpp"
#include "kernels/vendor/onednn.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

namespace {

using detail::ConvGeometry;

// The columns x0 <= x < x1 of an output row whose input column x s - p + j d
// lies inside [0, w): the rest of the row reads padding.
KOKKOS_INLINE_FUNCTION void inside_columns(int64_t j, const ConvGeometry& g, int64_t& x0,
                                           int64_t& x1) {
  const int64_t shift = j * g.dw - g.pw;  // input column of output column 0
  x0 = shift >= 0 ? 0 : (-shift + g.sw - 1) / g.sw;
  const int64_t last = g.w - 1 - shift;  // the largest x s that stays inside
  x1 = last < 0 ? 0 : last / g.sw + 1;
  if (x1 > g.ow) x1 = g.ow;
  if (x0 > x1) x0 = x1;
}

// cols[(c, i, j), (n, y, x)] = x[n, c, y sh - ph + i dh, x sw - pw + j dw], 0
// outside the input: the matrix whose product with the weight is the
// convolution of the g.n images of `in` (vol2col for volumes: rows (c, a, i,
// j), columns (n, z, y, x), input depth z sd - pd + a dd).
void im2col(const Device& device, View1 cols, ConstView1 in, const ConvGeometry& g) {
  const int64_t kk = g.kd * g.kh * g.kw, rows_per_c = g.n * g.od * g.oh;
  // Output row `row` of the columns: (c, a, i, j) and (n, z, y) of it.
  auto fill_row = [=] KOKKOS_FUNCTION(int64_t c, int64_t a, int64_t i, int64_t j, int64_t n,
                                      int64_t z, int64_t y, float* __restrict out) {
    const int64_t iz = z * g.sd - g.pd + a * g.dd;
    const int64_t iy = y * g.sh - g.ph + i * g.dh;
    if (iz < 0 || iz >= g.d || iy < 0 || iy >= g.h) {
      for (int64_t x = 0; x < g.ow; ++x) out[x] = 0.0f;
      return;
    }
    int64_t x0, x1;
    inside_columns(j, g, x0, x1);
    const float* __restrict src =
        &in((((n * g.c + c) * g.d + iz) * g.h + iy) * g.w) + (j * g.dw - g.pw);
    for (int64_t x = 0; x < x0; ++x) out[x] = 0.0f;
    if (g.sw == 1) {
      for (int64_t x = x0; x < x1; ++x) out[x] = src[x];
    } else {
      for (int64_t x = x0; x < x1; ++x) out[x] = src[x * g.sw];
    }
    for (int64_t x = x1; x < g.ow; ++x) out[x] = 0.0f;
  };
  if constexpr (compat::launches_are_synchronous()) {
    // Host backends: one work item per (c, a, i, j), walking its images and
    // rows with no index arithmetic per row.
    Kokkos::parallel_for(
        "kdp::conv2d im2col", kdp::detail::range(device, g.c * kk), KOKKOS_LAMBDA(const int64_t r) {
          const int64_t c = r / kk, a = (r % kk) / (g.kh * g.kw), i = (r / g.kw) % g.kh,
                        j = r % g.kw;
          float* out = &cols(r * rows_per_c * g.ow);
          for (int64_t n = 0; n < g.n; ++n) {
            for (int64_t z = 0; z < g.od; ++z) {
              for (int64_t y = 0; y < g.oh; ++y, out += g.ow) fill_row(c, a, i, j, n, z, y, out);
            }
          }
        });
  } else {
    Kokkos::parallel_for(
        "kdp::conv2d im2col", kdp::detail::range(device, g.c * kk * rows_per_c),
        KOKKOS_LAMBDA(const int64_t row) {
          const int64_t r = row / rows_per_c, rest = row % rows_per_c;
          fill_row(r / kk, (r % kk) / (g.kh * g.kw), (r / g.kw) % g.kh, r % g.kw,
                   rest / (g.od * g.oh), (rest / g.oh) % g.od, rest % g.oh, &cols(row * g.ow));
        });
  }
}

// The input (depth, height) of output (z, y) under kernel tap (a, i), when
// some output reads it: a kernel tap (a, i) takes input (z sd - pd + a dd,
// y sh - ph + i dh).
KOKKOS_INLINE_FUNCTION bool reads_row(int64_t iz, int64_t iy, int64_t a, int64_t i,
                                      const ConvGeometry& g, int64_t& z, int64_t& y) {
  const int64_t tz = iz + g.pd - a * g.dd, ty = iy + g.ph - i * g.dh;
  if (tz < 0 || tz % g.sd != 0 || tz / g.sd >= g.od) return false;
  if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) return false;
  z = tz / g.sd;
  y = ty / g.sh;
  return true;
}

// The adjoint of im2col: dx[n, c, iz, iy, ix] gathers every column entry that
// im2col took from that input element. One work item per input row, which
// adds whole rows of the columns (contiguous when the stride is 1).
void col2im(const Device& device, View1 dx, ConstView1 dcols, const ConvGeometry& g) {
  const int64_t ncols = g.columns(), plane = g.out_plane();
  Kokkos::parallel_for(
      "kdp::conv2d col2im", kdp::detail::range(device, g.n * g.c * g.d * g.h),
      KOKKOS_LAMBDA(const int64_t row) {
        const int64_t iy = row % g.h, iz = (row / g.h) % g.d, c = (row / (g.h * g.d)) % g.c,
                      n = row / (g.h * g.d * g.c);
        float* __restrict acc = &dx(row * g.w);
        for (int64_t ix = 0; ix < g.w; ++ix) acc[ix] = 0.0f;
        for (int64_t ai = 0; ai < g.kd * g.kh; ++ai) {
          const int64_t a = ai / g.kh, i = ai % g.kh;
          int64_t z, y;
          if (!reads_row(iz, iy, a, i, g, z, y)) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t r = (c * g.kd * g.kh + ai) * g.kw + j;  // (c, a, i, j)
            const float* __restrict src = &dcols(r * ncols + n * plane + (z * g.oh + y) * g.ow);
            int64_t x0, x1;
            inside_columns(j, g, x0, x1);
            // Output column x took input column x sw + shift.
            const int64_t shift = j * g.dw - g.pw;
            if (g.sw == 1) {
              for (int64_t x = x0; x < x1; ++x) acc[x + shift] += src[x];
            } else {
              for (int64_t x = x0; x < x1; ++x) acc[x * g.sw + shift] += src[x];
            }
          }
        }
      });
}

// out[n, o, p] = res[o, n plane + p] + bias[o] (then max(., 0) with `relu`):
// the GEMM's [o, (n, p)] result in NCHW order.
void to_nchw(const Device& device, View1 out, ConstView1 res, ConstView1 bias, bool has_bias,
             bool relu, const ConvGeometry& g) {
  const int64_t plane = g.out_plane(), ncols = g.columns();
  kdp::detail::for_each_2d(
      "kdp::conv2d output", device, g.n * g.o, plane,
      KOKKOS_LAMBDA(const int64_t row, const int64_t p) {
        const int64_t n = row / g.o, o = row % g.o;
        const float v = res(o * ncols + n * plane + p) + (has_bias ? bias(o) : 0.0f);
        out(row * plane + p) = relu && v <= 0.0f ? 0.0f : v;  // NaN stays NaN, as relu()
      });
}

// res[o, n plane + p] = gy[n, o, p] (0 where the ReLU after the convolution
// gave 0, with `relu`: y is then its output), the output's gradient in the
// GEMMs' order; with `bias_sum`, its sum over every (n, p) per o too.
void from_nchw(const Device& device, View1 res, ConstView1 gy, ConstView1 y, bool relu,
               View1 bias_sum, bool want_bias, const ConvGeometry& g) {
  const int64_t plane = g.out_plane(), ncols = g.columns();
  Kokkos::parallel_for(
      "kdp::conv2d output gradient", kdp::detail::range(device, g.o),
      KOKKOS_LAMBDA(const int64_t o) {
        // The sum in eight float lanes (a loop the compiler vectorizes), the
        // planes' sums in double.
        constexpr int64_t kLanes = 8;
        double sum = 0.0;
        for (int64_t n = 0; n < g.n; ++n) {
          const float* __restrict src = &gy((n * g.o + o) * plane);
          const float* __restrict kept = relu ? &y((n * g.o + o) * plane) : nullptr;
          float* __restrict dst = &res(o * ncols + n * plane);
          float lane[kLanes] = {};
          int64_t p = 0;
          for (; p + kLanes <= plane; p += kLanes) {
            for (int64_t k = 0; k < kLanes; ++k) {
              const float v = relu && !(kept[p + k] > 0.0f) ? 0.0f : src[p + k];
              dst[p + k] = v;
              lane[k] += v;
            }
          }
          float rest = 0.0f;
          for (; p < plane; ++p) {
            const float v = relu && !(kept[p] > 0.0f) ? 0.0f : src[p];
            dst[p] = v;
            rest += v;
          }
          for (int64_t k = 0; k < kLanes; ++k) rest += lane[k];
          sum += rest;
        }
        if (want_bias) bias_sum(o) = static_cast<float>(sum);
      });
}

// One plane of the output gradient: out = g where the ReLU after the
// convolution kept its output (y > 0), else 0, with `y` (otherwise nothing is
// written); *sum = the sum of what out holds, in sixteen float lanes.
KDP_ALWAYS_INLINE void gradient_plane_body(const float* __restrict g, const float* __restrict y,
                                           float* __restrict out, int64_t len, float* sum) {
  constexpr int64_t kLanes = 16;
  float lane[kLanes] = {};
  int64_t p = 0;
  if (y != nullptr) {
    for (; p + kLanes <= len; p += kLanes) {
      for (int64_t k = 0; k < kLanes; ++k) {
        const float v = g[p + k];  // read whatever the mask says: a select, no branch
        const float m = y[p + k] > 0.0f ? v : 0.0f;
        out[p + k] = m;
        lane[k] += m;
      }
    }
    for (; p < len; ++p) {
      const float v = g[p];
      out[p] = y[p] > 0.0f ? v : 0.0f;
      lane[0] += out[p];
    }
  } else {
    for (; p + kLanes <= len; p += kLanes) {
      for (int64_t k = 0; k < kLanes; ++k) lane[k] += g[p + k];
    }
    for (; p < len; ++p) lane[0] += g[p];
  }
  float total = 0.0f;
  for (int64_t k = 0; k < kLanes; ++k) total += lane[k];
  *sum = total;
}
KDP_HOST_KERNEL(gradient_plane, gradient_plane_body,
                (const float* __restrict g, const float* __restrict y, float* __restrict out,
                 int64_t len, float* sum),
                (g, y, out, len, sum))

// out = gy where the ReLU after the convolution kept its output (y > 0),
// else 0, with `relu` (otherwise out is gy itself and is not written); with
// `want_bias`, bias_sum[o] = the sum of out over every (n, p): planes in
// float lanes, their sums in double.
void output_gradient(const Device& device, View1 out, ConstView1 gy, ConstView1 y, bool relu,
                     View1 bias_sum, bool want_bias, const ConvGeometry& g) {
  const int64_t plane = g.out_plane();
  if constexpr (compat::launches_are_synchronous()) {
    kdp::detail::host_chunks("kdp::conv2d output gradient", device, g.o, 1,
                             [=](int64_t o, int64_t) {
                               double sum = 0.0;
                               for (int64_t n = 0; n < g.n; ++n) {
                                 const int64_t at = (n * g.o + o) * plane;
                                 float part = 0.0f;
                                 gradient_plane(&gy(at), relu ? &y(at) : nullptr,
                                                relu ? &out(at) : nullptr, plane, &part);
                                 sum += part;
                               }
                               if (want_bias) bias_sum(o) = static_cast<float>(sum);
                             });
  } else {
    Kokkos::parallel_for(
        "kdp::conv2d output gradient", kdp::detail::range(device, g.o),
        KOKKOS_LAMBDA(const int64_t o) {
          double sum = 0.0;
          for (int64_t n = 0; n < g.n; ++n) {
            const int64_t at = (n * g.o + o) * plane;
            for (int64_t p = 0; p < plane; ++p) {
              const float v = relu && !(y(at + p) > 0.0f) ? 0.0f : gy(at + p);
              if (relu) out(at + p) = v;
              sum += v;
            }
          }
          if (want_bias) bias_sum(o) = static_cast<float>(sum);
        });
  }
}

// Group `k`'s block of a row-major matrix of `rows` x `cols` per group.
ConstView2 block(const float* data, int64_t k, int64_t rows, int64_t cols) {
  return ConstView2(data + k * rows * cols, static_cast<size_t>(rows), static_cast<size_t>(cols));
}
View2 block_out(float* data, int64_t k, int64_t rows, int64_t cols) {
  return View2(data + k * rows * cols, static_cast<size_t>(rows), static_cast<size_t>(cols));
}

// The batch is unfolded and multiplied in chunks of images. On host backends
// a chunk's columns fit in the cache, so the GEMM reads what im2col just
// wrote, and no more than a chunk's columns are ever in memory; on a GPU a
// chunk is as many images as 256 MiB of columns hold (the whole batch of
// most 2-d layers: one GEMM per group; volumes' columns are far larger).
int64_t images_per_chunk(const ConvGeometry& g) {
  const int64_t per_image = std::max<int64_t>(1, g.rows() * g.out_plane());
  constexpr int64_t kCacheFloats = int64_t{1} << 18;   // 1 MiB
  constexpr int64_t kDeviceFloats = int64_t{1} << 26;  // 256 MiB
  const int64_t budget = compat::host_accessible_memory() ? kCacheFloats : kDeviceFloats;
  return std::clamp<int64_t>(budget / per_image, 1, std::max<int64_t>(1, g.n));
}

// The geometry of images [n0, n0 + count) alone.
ConvGeometry chunk_of(const ConvGeometry& g, int64_t count) {
  ConvGeometry c = g;
  c.n = count;
  return c;
}

// Images [n0, n0 + g.n) of a batch of `per_image` floats each.
ConstView1 images(const float* data, int64_t n0, int64_t count, int64_t per_image) {
  return ConstView1(data + n0 * per_image, static_cast<size_t>(count * per_image));
}
View1 images_out(float* data, int64_t n0, int64_t count, int64_t per_image) {
  return View1(data + n0 * per_image, static_cast<size_t>(count * per_image));
}

// Where a convolution runs: oneDNN on host backends of builds that have it,
// for one group; else kdp's im2col and GEMM. KDP_CONV_PATH=im2col|onednn
// asks for one (tests run both; a path that cannot take the shape is not taken).
bool on_onednn(const ConvGeometry& g, Precision precision) {
  if constexpr (!compat::host_accessible_memory()) {
    return false;
  } else {
    static const std::string asked = [] {
      const char* env = std::getenv("KDP_CONV_PATH");
      return std::string(env == nullptr ? "" : env);
    }();
    if (asked == "im2col" || !detail::onednn::available() || g.groups != 1) return false;
    if (precision == Precision::bf16 && !detail::onednn::supports_bf16()) return false;
    return detail::onednn::conv_supported(g);
  }
}

class Conv2dNode : public autograd::Node {
 public:
  Conv2dNode(const Device& device, const Tensor& x, const Tensor& weight, const ConvGeometry& g,
             bool has_bias, const Tensor& relu_output, const Tensor& kept_x)
      : Node(device),
        x_(x),
        weight_(weight),
        y_(relu_output),
        kept_x_(kept_x),
        g_(g),
        has_bias_(has_bias),
        relu_(relu_output.defined()),
        precision_(autocast_precision()) {}
  const char* name() const override {
    return g_.volume ? "kdp::conv3d" : relu_ ? "kdp::conv2d_relu" : "kdp::conv2d";
  }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const ConvGeometry& g = g_;
    const Device& dev = device();
    const bool want_x = next_edges()[0].valid(), want_w = next_edges()[1].valid();
    const bool want_b = has_bias_ && next_edges()[2].valid();
    const Tensor& gy = grads[0];
    Tensor gx = want_x ? Tensor::empty(g.input_shape(), dev) : Tensor();
    // (Zeros only for an empty batch: otherwise the first chunk's GEMM writes it.)
    Tensor gw = !want_w    ? Tensor()
                : g.n == 0 ? Tensor::zeros(g.weight_shape(), dev)
                           : Tensor::empty(g.weight_shape(), dev);
    Tensor gb = want_b ? Tensor::zeros(Shape{g.o}, dev) : Tensor();
    const float* w = want_x ? weight_.get(*this).data() : nullptr;
    const float* x = want_w && !kept_x_.defined() ? x_.get(*this).data() : nullptr;
    const float* y = relu_ ? y_.get(*this).data() : nullptr;
    if (on_onednn(g, precision_)) {
      onednn_backward(gy, x, w, y, gx, gw, gb);
      return {gx, gw, gb};
    }
    const int64_t chunk = images_per_chunk(g), og = g.group_out(), rg = g.group_rows();
    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      const ConvGeometry c = chunk_of(g, std::min(chunk, g.n - n0));
      const int64_t ncols = c.columns();
      Tensor gres = Tensor::empty(Shape{g.o, ncols}, dev);
      Tensor part = want_b ? Tensor::empty(Shape{g.o}, dev) : Tensor();
      from_nchw(dev, gres.flat(), images(gy.data(), n0, c.n, g.o * g.out_plane()),
                relu_ ? images(y, n0, c.n, g.o * g.out_plane()) : ConstView1(), relu_,
                want_b ? part.flat() : View1(), want_b, c);
      if (want_b) gb.add_(part);
      if (want_w) {  // gw += gres cols^T, the columns made again from the input
        Tensor cols = Tensor::empty(Shape{g.rows(), ncols}, dev);
        im2col(dev, cols.flat(), images(x, n0, c.n, g.in_image()), c);
        for (int64_t k = 0; k < g.groups; ++k) {
          detail::gemm(dev, "N", "T", 1.0f, block(gres.data(), k, og, ncols),
                       block(cols.data(), k, rg, ncols), n0 == 0 ? 0.0f : 1.0f,
                       block_out(gw.data(), k, og, rg), precision_);
        }
      }
      if (want_x) {  // gx = col2im(W^T gres)
        Tensor gcols = Tensor::empty(Shape{g.rows(), ncols}, dev);
        for (int64_t k = 0; k < g.groups; ++k) {
          detail::gemm(dev, "T", "N", 1.0f, block(w, k, og, rg), block(gres.data(), k, og, ncols),
                       0.0f, block_out(gcols.data(), k, rg, ncols), precision_);
        }
        col2im(dev, images_out(gx.data(), n0, c.n, g.in_image()), gcols.cflat(), c);
      }
    }
    return {gx, gw, gb};
  }
  void release_saved() override {
    x_.reset();
    weight_.reset();
    y_.reset();
    kept_x_ = Tensor();
  }

 private:
  // oneDNN's backward: the ReLU's mask applied to the output gradient and the
  // bias gradient summed in fp32 by kdp (one pass), the products by oneDNN.
  void onednn_backward(const Tensor& gy, const float* x, const float* w, const float* y, Tensor& gx,
                       Tensor& gw, Tensor& gb) const {
    const ConvGeometry& g = g_;
    const Device& dev = device();
    const bool bf16 = precision_ == Precision::bf16;
    Tensor masked = relu_ ? Tensor::empty(gy.shape(), dev) : gy;
    if (relu_ || gb.defined()) {
      output_gradient(dev, masked.flat(), gy.cflat(),
                      relu_ ? ConstView1(y, gy.numel()) : ConstView1(), relu_,
                      gb.defined() ? gb.flat() : View1(), gb.defined(), g);
    }
    dev.fence("kdp::conv2d backward operands");
    const ConvGeometry& d = g;
    detail::onednn::conv_backward(d, bf16, masked.data(), w, x, gx.defined() ? gx.data() : nullptr,
                                  gw.defined() ? gw.data() : nullptr,
                                  kept_x_.defined() ? kept_x_.data() : nullptr);
  }

 private:
  autograd::SavedTensor x_, weight_, y_;
  // The input as oneDNN's kernels read it (bf16 in bf16), written by the
  // forward: the weight gradient reads it instead of reordering x again.
  Tensor kept_x_;
  ConvGeometry g_;
  bool has_bias_;
  bool relu_;
  Precision precision_;  // the forward's, for the backward's products
};

// The geometry of a convolution of `x` by `w`: images (4-d tensors; the
// depth arguments then 1, 0 and 1) or volumes (5-d).
ConvGeometry geometry(const char* op, bool volume, const Tensor& x, const Tensor& w,
                      const Tensor& b, Size3 stride, Size3 padding, Size3 dilation,
                      int64_t groups) {
  const int r = volume ? 5 : 4;
  KDP_CHECK_FOR(op, x.dim() == r, ShapeError, "input {} is not [batch, channels, {}]",
                x.shape().str(), volume ? "depth, height, width" : "height, width");
  KDP_CHECK_FOR(op, w.dim() == r, ShapeError, "weight {} is not [out, in / groups, {}]",
                w.shape().str(), volume ? "kd, kh, kw" : "kh, kw");
  KDP_CHECK_FOR(
      op,
      groups >= 1 && stride.d >= 1 && stride.h >= 1 && stride.w >= 1 && dilation.d >= 1 &&
          dilation.h >= 1 && dilation.w >= 1 && padding.d >= 0 && padding.h >= 0 && padding.w >= 0,
      ValueError, "stride {} and dilation {} must be >= 1, padding {} >= 0 and groups {} >= 1",
      stride.str(), dilation.str(), padding.str(), groups);
  ConvGeometry g{x.size(0), x.size(1),     x.size(r - 2), x.size(r - 1),
                 w.size(0), w.size(r - 2), w.size(r - 1), 0,
                 0,         stride.h,      stride.w,      padding.h,
                 padding.w, dilation.h,    dilation.w,    groups};
  g.volume = volume;
  if (volume) {
    g.d = x.size(2);
    g.kd = w.size(2);
    g.sd = stride.d;
    g.pd = padding.d;
    g.dd = dilation.d;
  }
  KDP_CHECK_FOR(
      op, g.c % groups == 0 && g.o % groups == 0 && w.size(1) * groups == g.c, ShapeError,
      "input {} and weight {} do not fit {} group(s): the input's {} channels and the "
      "weight's {} outputs must divide into the groups, and the weight's second size must be "
      "{} / {}",
      x.shape().str(), w.shape().str(), groups, g.c, g.o, g.c, groups);
  g.od = window_output_size(g.d, g.kd, g.sd, g.pd, g.dd);
  g.oh = window_output_size(g.h, g.kh, g.sh, g.ph, g.dh);
  g.ow = window_output_size(g.w, g.kw, g.sw, g.pw, g.dw);
  KDP_CHECK_FOR(op, g.od >= 1 && g.oh >= 1 && g.ow >= 1, ShapeError,
                "a kernel {} (dilation {}, padding {}) does not fit the input {}", w.shape().str(),
                dilation.str(), padding.str(), x.shape().str());
  KDP_CHECK_FOR(op, !b.defined() || (b.dim() == 1 && b.size(0) == g.o), ShapeError,
                "bias {} is not [{}] for weight {}", b.shape().str(), g.o, w.shape().str());
  return g;
}

Tensor convolution(const char* op, bool relu, bool volume, const Tensor& input_in,
                   const Tensor& weight_in, const Tensor& bias_in, Size3 stride, Size3 padding,
                   Size3 dilation, int64_t groups) {
  trace::Region region(op);
  const Tensor& x = resolve(input_in);
  const Tensor& w = resolve(weight_in);
  const Tensor& b = resolve(bias_in);
  check_defined(op, x, "input");
  check_defined(op, w, "weight");
  check_same_device(op, x, "input", w, "weight");
  if (b.defined()) check_same_device(op, x, "input", b, "bias");
  const ConvGeometry g = geometry(op, volume, x, w, b, stride, padding, dilation, groups);
  const Device& dev = x.device();

  Tensor out = Tensor::empty(g.output_shape(), dev);
  const bool onednn_path = on_onednn(g, autocast_precision());
  const bool grad = autograd::needs_grad({&x, &w, &b});
  Tensor kept_x;  // x as oneDNN reads it, for the weight gradient
  if (onednn_path) {
    const ConvGeometry& d = g;
    const bool bf16 = autocast_precision() == Precision::bf16;
    if (grad && w.requires_grad()) {
      const size_t bytes = detail::onednn::conv_kept_input_bytes(d, bf16, relu, b.defined());
      if (bytes > 0) kept_x = Tensor::empty(Shape{static_cast<int64_t>((bytes + 3) / 4)}, dev);
    }
    dev.fence("kdp::conv2d operands");
    detail::onednn::conv_forward(d, bf16, relu, x.data(), w.data(),
                                 b.defined() ? b.data() : nullptr, out.data(),
                                 kept_x.defined() ? kept_x.data() : nullptr);
  }
  const int64_t chunk = onednn_path ? g.n : images_per_chunk(g), og = g.group_out(),
                rg = g.group_rows();
  for (int64_t n0 = onednn_path ? g.n : 0; n0 < g.n; n0 += chunk) {
    const ConvGeometry c = chunk_of(g, std::min(chunk, g.n - n0));
    const int64_t ncols = c.columns();
    Tensor cols = Tensor::empty(Shape{g.rows(), ncols}, dev);
    im2col(dev, cols.flat(), images(x.data(), n0, c.n, g.in_image()), c);
    Tensor res = Tensor::empty(Shape{g.o, ncols}, dev);
    for (int64_t k = 0; k < g.groups; ++k) {
      detail::gemm(dev, "N", "N", 1.0f, block(w.data(), k, og, rg),
                   block(cols.data(), k, rg, ncols), 0.0f, block_out(res.data(), k, og, ncols));
    }
    to_nchw(dev, images_out(out.data(), n0, c.n, g.o * g.out_plane()), res.cflat(),
            b.defined() ? b.cflat() : ConstView1(), b.defined(), relu, c);
  }

  if (grad) {
    // The input for the weight's gradient (its columns are made again there,
    // or oneDNN's copy of it is kept), the weight for the input's: only what
    // a wanted gradient needs is kept.
    auto node = std::make_shared<Conv2dNode>(
        dev, w.requires_grad() && !kept_x.defined() ? x : Tensor(),
        x.requires_grad() ? w : Tensor(), g, b.defined(), relu ? out : Tensor(), kept_x);
    node->set_next_edges({&x, &w, &b});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

}  // namespace ops_detail

using namespace ops_detail;

namespace {
// A 2-d argument as the 3-d one of an image: depth 1 (padding 0).
Size3 flat(Size2 s, int64_t depth) {
  return Size3(depth, s.h, s.w);
}
}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Size2 stride,
              Size2 padding, Size2 dilation, int64_t groups) {
  return convolution("kdp::conv2d", false, false, input, weight, bias, flat(stride, 1),
                     flat(padding, 0), flat(dilation, 1), groups);
}

Tensor conv2d_relu(const Tensor& input, const Tensor& weight, const Tensor& bias, Size2 stride,
                   Size2 padding, Size2 dilation, int64_t groups) {
  return convolution("kdp::conv2d_relu", true, false, input, weight, bias, flat(stride, 1),
                     flat(padding, 0), flat(dilation, 1), groups);
}

Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, Size3 stride,
              Size3 padding, Size3 dilation, int64_t groups) {
  return convolution("kdp::conv3d", false, true, input, weight, bias, stride, padding, dilation,
                     groups);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t padding, int64_t dilation, int64_t groups) {
  const char* op = "kdp::conv1d";
  KDP_CHECK_FOR(op, input.defined() && weight.defined(), ValueError,
                "the input and the weight must be defined");
  KDP_CHECK_FOR(op, input.dim() == 3 && weight.dim() == 3, ShapeError,
                "input {} must be [batch, channels, length] and weight {} [out, in / groups, "
                "kernel]",
                input.describe(), weight.describe());
  const Tensor out =
      convolution(op, false, false, input.reshape({input.size(0), input.size(1), 1, input.size(2)}),
                  weight.reshape({weight.size(0), weight.size(1), 1, weight.size(2)}), bias,
                  Size3(1, 1, stride), Size3(0, 0, padding), Size3(1, 1, dilation), groups);
  return out.reshape({out.size(0), out.size(1), out.size(3)});
}

}  // namespace kdp
