// layer_norm: one pass a row forward (statistics in double), and backward a
// pass a row for the input and a pass a column for the affine parameters.

#include <fmt/format.h>

#include "kdp/core/kokkos_compat.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/ops/normalization.hpp"
#include "kernels/native/host_kernels.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

namespace {

namespace math = compat::math;

// y[r, :] = (x[r, :] - mean_r) rstd_r * w + b; mean and rstd kept per row.
void layer_norm_forward(const Device& device, View1 y, View1 mean, View1 rstd, ConstView1 x,
                        ConstView1 w, ConstView1 b, int64_t rows, int64_t n, double eps, bool has_w,
                        bool has_b) {
  Kokkos::parallel_for(
      "kdp::layer_norm", kdp::detail::range(device, rows), KOKKOS_LAMBDA(const int64_t r) {
        const int64_t base = r * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += x(base + i);
        const double mu = sum / static_cast<double>(n);
        double sq = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const double d = x(base + i) - mu;
          sq += d * d;
        }
        const double inv = 1.0 / math::sqrt(sq / static_cast<double>(n) + eps);
        const float m = static_cast<float>(mu), s = static_cast<float>(inv);
        mean(r) = m;
        rstd(r) = s;
        for (int64_t i = 0; i < n; ++i) {
          float v = (x(base + i) - m) * s;
          if (has_w) v *= w(i);
          if (has_b) v += b(i);
          y(base + i) = v;
        }
      });
}

// gx[r, :] = rstd (gh - mean(gh) - xhat mean(gh xhat)), gh = g w,
// xhat = (x - mean) rstd; sums in double.
void layer_norm_input_grad(const Device& device, View1 gx, ConstView1 g, ConstView1 x,
                           ConstView1 mean, ConstView1 rstd, ConstView1 w, int64_t rows, int64_t n,
                           bool has_w) {
  Kokkos::parallel_for(
      "kdp::layer_norm backward", kdp::detail::range(device, rows), KOKKOS_LAMBDA(const int64_t r) {
        const int64_t base = r * n;
        const float m = mean(r), s = rstd(r);
        double sum_gh = 0.0, sum_ghx = 0.0;
        for (int64_t i = 0; i < n; ++i) {
          const float gh = has_w ? g(base + i) * w(i) : g(base + i);
          sum_gh += gh;
          sum_ghx += static_cast<double>(gh) * ((x(base + i) - m) * s);
        }
        const float a = static_cast<float>(sum_gh / static_cast<double>(n));
        const float c = static_cast<float>(sum_ghx / static_cast<double>(n));
        for (int64_t i = 0; i < n; ++i) {
          const float gh = has_w ? g(base + i) * w(i) : g(base + i);
          gx(base + i) = s * (gh - a - (x(base + i) - m) * s * c);
        }
      });
}

// Columns [i0, i1) of the affine gradients on host memory: the rows outer,
// the columns' sums side by side (at the CPU's width), each in the rows'
// order as the kernel below adds them: the same bits.
constexpr int64_t kAffineColumns = 64;
KDP_ALWAYS_INLINE void affine_columns_body(float* __restrict gw, float* __restrict gb,
                                           const float* __restrict g, const float* __restrict x,
                                           const float* __restrict mean,
                                           const float* __restrict rstd, int64_t rows, int64_t n,
                                           int64_t i0, int64_t i1) {
  double sw[kAffineColumns] = {}, sb[kAffineColumns] = {};
  const int64_t width = i1 - i0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * n + i0;
    const float* xr = x + r * n + i0;
    const float m = mean[r], sd = rstd[r];
    for (int64_t i = 0; i < width; ++i) {
      sw[i] += static_cast<double>(gr[i]) * ((xr[i] - m) * sd);
      sb[i] += gr[i];
    }
  }
  for (int64_t i = 0; i < width; ++i) {
    if (gw != nullptr) gw[i0 + i] = static_cast<float>(sw[i]);
    if (gb != nullptr) gb[i0 + i] = static_cast<float>(sb[i]);
  }
}
KDP_HOST_KERNEL(affine_columns, affine_columns_body,
                (float* gw, float* gb, const float* g, const float* x, const float* mean,
                 const float* rstd, int64_t rows, int64_t n, int64_t i0, int64_t i1),
                (gw, gb, g, x, mean, rstd, rows, n, i0, i1))

// gw[i] = sum over rows of g xhat, gb[i] = sum over rows of g, rows in order.
void layer_norm_affine_grad(const Device& device, View1 gw, View1 gb, ConstView1 g, ConstView1 x,
                            ConstView1 mean, ConstView1 rstd, int64_t rows, int64_t n, bool want_w,
                            bool want_b) {
  if constexpr (compat::launches_are_synchronous()) {
    float* w_out = want_w ? gw.data() : nullptr;
    float* b_out = want_b ? gb.data() : nullptr;
    const float *gs = g.data(), *xs = x.data(), *ms = mean.data(), *rs = rstd.data();
    kdp::detail::host_chunks("kdp::layer_norm backward affine", device, n, kAffineColumns,
                             [=](int64_t i0, int64_t i1) {
                               affine_columns(w_out, b_out, gs, xs, ms, rs, rows, n, i0, i1);
                             });
    return;
  }
  Kokkos::parallel_for(
      "kdp::layer_norm backward affine", kdp::detail::range(device, n),
      KOKKOS_LAMBDA(const int64_t i) {
        double sw = 0.0, sb = 0.0;
        for (int64_t r = 0; r < rows; ++r) {
          const float gv = g(r * n + i);
          sw += static_cast<double>(gv) * ((x(r * n + i) - mean(r)) * rstd(r));
          sb += gv;
        }
        if (want_w) gw(i) = static_cast<float>(sw);
        if (want_b) gb(i) = static_cast<float>(sb);
      });
}

class LayerNormNode : public autograd::Node {
 public:
  LayerNormNode(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                const Shape& norm, int64_t rows, int64_t n, bool has_b)
      : Node(x.device()),
        x_(x),
        w_(w.defined() ? autograd::SavedTensor(w) : autograd::SavedTensor()),
        mean_(mean),
        rstd_(rstd),
        rows_(rows),
        n_(n),
        has_w_(w.defined()),
        has_b_(has_b),
        norm_(norm) {}
  const char* name() const override { return "kdp::layer_norm"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const Tensor& x = x_.get(*this);
    Tensor gx, gw, gb;
    const ConstView1 w = has_w_ ? w_.get(*this).cflat() : ConstView1();
    if (next_edges()[0].valid()) {
      gx = Tensor::empty(x.shape(), device());
      layer_norm_input_grad(device(), gx.flat(), g.cflat(), x.cflat(), mean_.cflat(), rstd_.cflat(),
                            w, rows_, n_, has_w_);
    }
    const bool want_w = has_w_ && next_edges()[1].valid();
    const bool want_b = has_b_ && next_edges()[2].valid();
    if (want_w || want_b) {
      if (want_w) gw = Tensor::empty(norm_, device());
      if (want_b) gb = Tensor::empty(norm_, device());
      layer_norm_affine_grad(device(), want_w ? gw.flat() : View1(), want_b ? gb.flat() : View1(),
                             g.cflat(), x.cflat(), mean_.cflat(), rstd_.cflat(), rows_, n_, want_w,
                             want_b);
    }
    return {gx, gw, gb};
  }
  void release_saved() override {
    x_.reset();
    w_.reset();
    mean_ = rstd_ = Tensor();
  }

 private:
  autograd::SavedTensor x_, w_;
  Tensor mean_, rstd_;
  int64_t rows_, n_;
  bool has_w_, has_b_;
  Shape norm_;
};

}  // namespace

}  // namespace ops_detail

using namespace ops_detail;

Tensor layer_norm(const Tensor& x_in, const std::vector<int64_t>& normalized_shape,
                  const Tensor& w_in, const Tensor& b_in, double eps) {
  trace::Region region("kdp::layer_norm");
  const char* op = "kdp::layer_norm";
  const Tensor& x = resolve(x_in);
  const Tensor& w = resolve(w_in);
  const Tensor& b = resolve(b_in);
  check_defined(op, x, "input");
  const int k = static_cast<int>(normalized_shape.size());
  auto wanted = [&] { return fmt::format("[{}]", fmt::join(normalized_shape, ", ")); };
  KDP_CHECK(k >= 1 && k <= x.dim(), ShapeError,
            "normalized_shape {} must name 1 to {} trailing dimension(s) of input {}", wanted(),
            x.dim(), x.shape().str());
  int64_t n = 1;
  for (int i = 0; i < k; ++i) {
    KDP_CHECK(x.size(x.dim() - k + i) == normalized_shape[static_cast<size_t>(i)], ShapeError,
              "input {} does not end in normalized_shape {}", x.shape().str(), wanted());
    n *= normalized_shape[static_cast<size_t>(i)];
  }
  const Shape norm(normalized_shape);
  for (const auto& [t, what] :
       {std::pair<const Tensor*, const char*>{&w, "weight"}, {&b, "bias"}}) {
    if (!t->defined()) continue;
    KDP_CHECK(t->shape() == norm, ShapeError, "{} {} must be normalized_shape {}", what,
              t->describe(), wanted());
    check_same_device(op, x, "input", *t, what);
  }
  KDP_CHECK(eps > 0.0, ValueError, "eps {} must be positive", eps);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const Device& dev = x.device();
  Tensor out = Tensor::empty(x.shape(), dev);
  Tensor mean = Tensor::empty(Shape{rows}, dev);
  Tensor rstd = Tensor::empty(Shape{rows}, dev);
  if (rows > 0 && n > 0) {
    layer_norm_forward(dev, out.flat(), mean.flat(), rstd.flat(), x.cflat(),
                       w.defined() ? w.cflat() : ConstView1(),
                       b.defined() ? b.cflat() : ConstView1(), rows, n, eps, w.defined(),
                       b.defined());
  }
  if (autograd::needs_grad({&x, &w, &b})) {
    auto node = std::make_shared<LayerNormNode>(x, w, mean, rstd, norm, rows, n, b.defined());
    node->set_next_edges({&x, &w, &b});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kdp
