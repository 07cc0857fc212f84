#include "kdp/ops/conv.hpp"

#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

namespace {

// The sizes of one convolution: input [n, c, h, w], weight [o, c / groups, kh,
// kw], output [n, o, oh, ow].
struct ConvGeometry {
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t oh, ow;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups;

  int64_t out_plane() const { return oh * ow; }
  int64_t columns() const { return n * oh * ow; }              // of the im2col matrix
  int64_t group_rows() const { return c / groups * kh * kw; }  // its rows per group
  int64_t group_out() const { return o / groups; }
};

// cols[(c, i, j), (n, y, x)] = x[n, c, y sh - ph + i dh, x sw - pw + j dw], 0
// outside the input: the matrix whose product with the weight is the
// convolution, for the whole batch at once.
void im2col(const Device& device, View1 cols, ConstView1 in, const ConvGeometry& g) {
  const int64_t kk = g.kh * g.kw, rows_per_c = g.n * g.oh;
  kdp::detail::for_each_2d(
      "kdp::conv2d im2col", device, g.c * kk * rows_per_c, g.ow,
      KOKKOS_LAMBDA(const int64_t row, const int64_t x) {
        const int64_t r = row / rows_per_c, rest = row % rows_per_c;
        const int64_t c = r / kk, i = (r % kk) / g.kw, j = r % g.kw;
        const int64_t n = rest / g.oh, y = rest % g.oh;
        const int64_t iy = y * g.sh - g.ph + i * g.dh, ix = x * g.sw - g.pw + j * g.dw;
        const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
        cols(row * g.ow + x) = inside ? in(((n * g.c + c) * g.h + iy) * g.w + ix) : 0.0f;
      });
}

// The adjoint of im2col: dx[n, c, iy, ix] gathers every column entry that
// im2col took from that input element.
void col2im(const Device& device, View1 dx, ConstView1 dcols, const ConvGeometry& g) {
  const int64_t ncols = g.columns(), plane = g.out_plane();
  kdp::detail::for_each_2d(
      "kdp::conv2d col2im", device, g.n * g.c * g.h, g.w,
      KOKKOS_LAMBDA(const int64_t row, const int64_t ix) {
        const int64_t iy = row % g.h, c = (row / g.h) % g.c, n = row / (g.h * g.c);
        float acc = 0.0f;
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ty = iy + g.ph - i * g.dh;
          if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
          const int64_t y = ty / g.sh;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t tx = ix + g.pw - j * g.dw;
            if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
            const int64_t r = (c * g.kh + i) * g.kw + j;
            acc += dcols(r * ncols + n * plane + y * g.ow + tx / g.sw);
          }
        }
        dx(row * g.w + ix) = acc;
      });
}

// out[n, o, p] = res[o, n plane + p] + bias[o]: the GEMM's [o, (n, p)] result
// in NCHW order.
void to_nchw(const Device& device, View1 out, ConstView1 res, ConstView1 bias, bool has_bias,
             const ConvGeometry& g) {
  const int64_t plane = g.out_plane(), ncols = g.columns();
  kdp::detail::for_each_2d(
      "kdp::conv2d output", device, g.n * g.o, plane,
      KOKKOS_LAMBDA(const int64_t row, const int64_t p) {
        const int64_t n = row / g.o, o = row % g.o;
        out(row * plane + p) = res(o * ncols + n * plane + p) + (has_bias ? bias(o) : 0.0f);
      });
}

// res[o, n plane + p] = gy[n, o, p]: the output's gradient in the GEMMs' order.
void from_nchw(const Device& device, View1 res, ConstView1 gy, const ConvGeometry& g) {
  const int64_t plane = g.out_plane(), ncols = g.columns();
  kdp::detail::for_each_2d(
      "kdp::conv2d output gradient", device, g.o * g.n, plane,
      KOKKOS_LAMBDA(const int64_t row, const int64_t p) {
        const int64_t o = row / g.n, n = row % g.n;
        res(o * ncols + n * plane + p) = gy((n * g.o + o) * plane + p);
      });
}

// Group `k`'s block of a row-major matrix of `rows` x `cols` split into
// `groups` blocks of rows.
ConstView2 group_block(const Tensor& t, int64_t k, int64_t rows, int64_t cols) {
  return ConstView2(t.data() + k * rows * cols, static_cast<size_t>(rows),
                    static_cast<size_t>(cols));
}
View2 group_block_out(const Tensor& t, int64_t k, int64_t rows, int64_t cols) {
  return View2(t.data() + k * rows * cols, static_cast<size_t>(rows), static_cast<size_t>(cols));
}

class Conv2dNode : public autograd::Node {
 public:
  Conv2dNode(const Device& device, const Tensor& cols, const Tensor& weight, const ConvGeometry& g,
             bool has_bias)
      : Node(device), cols_(cols), weight_(weight), g_(g), has_bias_(has_bias) {}
  const char* name() const override { return "kdp::conv2d"; }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const ConvGeometry& g = g_;
    const Device& dev = device();
    const int64_t ncols = g.columns(), og = g.group_out(), rg = g.group_rows();
    Tensor gres = Tensor::empty(Shape{g.o, ncols}, dev);
    from_nchw(dev, gres.flat(), grads[0].cflat(), g);
    Tensor gx, gw, gb;
    if (next_edges()[0].valid()) {
      const Tensor& w = weight_.get(*this);
      Tensor gcols = Tensor::empty(Shape{g.c * g.kh * g.kw, ncols}, dev);
      for (int64_t k = 0; k < g.groups; ++k) {
        gemm(dev, "T", "N", 1.0f, group_block(w, k, og, rg), group_block(gres, k, og, ncols), 0.0f,
             group_block_out(gcols, k, rg, ncols));
      }
      gx = Tensor::empty(Shape{g.n, g.c, g.h, g.w}, dev);
      col2im(dev, gx.flat(), gcols.cflat(), g);
    }
    if (next_edges()[1].valid()) {
      const Tensor& cols = cols_.get(*this);
      gw = Tensor::empty(Shape{g.o, g.c / g.groups, g.kh, g.kw}, dev);
      for (int64_t k = 0; k < g.groups; ++k) {
        gemm(dev, "N", "T", 1.0f, group_block(gres, k, og, ncols), group_block(cols, k, rg, ncols),
             0.0f, group_block_out(gw, k, og, rg));
      }
    }
    if (has_bias_ && next_edges()[2].valid()) {
      gb = Tensor::empty(Shape{g.o}, dev);
      sum_dim_kernel(dev, gb.flat(), gres.cflat(), DimSplit{g.o, ncols, 1}, 1.0f);
    }
    return {gx, gw, gb};
  }
  void release_saved() override {
    cols_.reset();
    weight_.reset();
  }

 private:
  autograd::SavedTensor cols_;
  autograd::SavedTensor weight_;
  ConvGeometry g_;
  bool has_bias_;
};

ConvGeometry geometry(const Tensor& x, const Tensor& w, const Tensor& b, Size2 stride,
                      Size2 padding, Size2 dilation, int64_t groups) {
  const char* op = "kdp::conv2d";
  if (x.dim() != 4) {
    throw ShapeError(
        fmt::format("{}: input {} is not [batch, channels, height, width]", op, x.shape().str()));
  }
  if (w.dim() != 4) {
    throw ShapeError(
        fmt::format("{}: weight {} is not [out, in / groups, kh, kw]", op, w.shape().str()));
  }
  if (groups < 1 || stride.h < 1 || stride.w < 1 || dilation.h < 1 || dilation.w < 1 ||
      padding.h < 0 || padding.w < 0) {
    throw ValueError(fmt::format(
        "{}: stride {} and dilation {} must be >= 1, padding {} >= 0 and groups {} >= 1", op,
        stride.str(), dilation.str(), padding.str(), groups));
  }
  ConvGeometry g{x.size(0), x.size(1),  x.size(2),  x.size(3), w.size(0), w.size(2),
                 w.size(3), 0,          0,          stride.h,  stride.w,  padding.h,
                 padding.w, dilation.h, dilation.w, groups};
  if (g.c % groups != 0 || g.o % groups != 0 || w.size(1) * groups != g.c) {
    throw ShapeError(fmt::format(
        "{}: input {} and weight {} do not fit {} group(s): the input's {} channels and the "
        "weight's {} outputs must divide into the groups, and the weight's second size must be "
        "{} / {}",
        op, x.shape().str(), w.shape().str(), groups, g.c, g.o, g.c, groups));
  }
  g.oh = window_output_size(g.h, g.kh, g.sh, g.ph, g.dh);
  g.ow = window_output_size(g.w, g.kw, g.sw, g.pw, g.dw);
  if (g.oh < 1 || g.ow < 1) {
    throw ShapeError(
        fmt::format("{}: a {}x{} kernel (dilation {}, padding {}) does not fit the {}x{} input {}",
                    op, g.kh, g.kw, dilation.str(), padding.str(), g.h, g.w, x.shape().str()));
  }
  if (b.defined() && (b.dim() != 1 || b.size(0) != g.o)) {
    throw ShapeError(fmt::format("{}: bias {} is not [{}] for weight {}", op, b.shape().str(), g.o,
                                 w.shape().str()));
  }
  return g;
}

}  // namespace

}  // namespace ops_detail

using namespace ops_detail;

Tensor conv2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, Size2 stride,
              Size2 padding, Size2 dilation, int64_t groups) {
  const char* op = "kdp::conv2d";
  const Tensor& x = resolve(input_in);
  const Tensor& w = resolve(weight_in);
  const Tensor& b = resolve(bias_in);
  check_defined(op, x, "input");
  check_defined(op, w, "weight");
  check_same_device(op, x, "input", w, "weight");
  if (b.defined()) check_same_device(op, x, "input", b, "bias");
  const ConvGeometry g = geometry(x, w, b, stride, padding, dilation, groups);
  const Device& dev = x.device();

  const int64_t ncols = g.columns(), og = g.group_out(), rg = g.group_rows();
  Tensor cols = Tensor::empty(Shape{g.c * g.kh * g.kw, ncols}, dev);
  if (cols.numel() > 0) im2col(dev, cols.flat(), x.cflat(), g);
  Tensor res = Tensor::empty(Shape{g.o, ncols}, dev);
  for (int64_t k = 0; k < g.groups; ++k) {
    gemm(dev, "N", "N", 1.0f, group_block(w, k, og, rg), group_block(cols, k, rg, ncols), 0.0f,
         group_block_out(res, k, og, ncols));
  }
  Tensor out = Tensor::empty(Shape{g.n, g.o, g.oh, g.ow}, dev);
  to_nchw(dev, out.flat(), res.cflat(), b.defined() ? b.cflat() : ConstView1(), b.defined(), g);

  if (autograd::needs_grad({&x, &w, &b})) {
    // The columns for the weight's gradient, the weight for the input's: only
    // what a wanted gradient needs is kept.
    auto node = std::make_shared<Conv2dNode>(dev, w.requires_grad() ? cols : Tensor(),
                                             x.requires_grad() ? w : Tensor(), g, b.defined());
    node->set_next_edges({&x, &w, &b});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kdp
