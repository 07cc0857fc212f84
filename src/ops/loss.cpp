#include "kdp/ops/loss.hpp"

#include <cmath>
#include <optional>

#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/ops/activation.hpp"
#include "kdp/ops/elementwise.hpp"
#include "kdp/ops/reduction.hpp"
#include "kdp/ops/shape.hpp"
#include "kernels/native/vector_exp.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

namespace math = compat::math;

// A switch, as every enum's names in kdp: -Wswitch then names an enumerator
// added without its name, which a shared table could not.
const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None:
      return "none";
    case Reduction::Mean:
      return "mean";
    case Reduction::Sum:
      return "sum";
  }
  return "?";
}

// Every target must be an integer in [0, classes). Reports the first that is not.
// Class indices are checked here on host backends, where reading them costs
// nothing. On a GPU that would wait for the device and copy to the host on every
// call; there the loss kernels check each row themselves and give a NaN loss for
// a target that is not a class index, which the Trainer's anomaly check reports.
void check_class_targets(const char* op, const Tensor& target, int64_t batch, int64_t classes,
                         std::optional<int64_t> ignore_index = std::nullopt) {
  KDP_CHECK_FOR(op, target.dim() == 1 && target.size(0) == batch, ShapeError,
                "target {} must be [{}] (one class index per row of input)", target.shape().str(),
                batch);
  if constexpr (compat::host_accessible_memory()) {
    // Host memory, written by kernels that have finished: read it in place.
    const float* t = target.data();
    for (int64_t i = 0; i < batch; ++i) {
      const float v = t[i];
      if (ignore_index && v == static_cast<float>(*ignore_index)) continue;
      KDP_CHECK_FOR(op, v >= 0.0f && v < static_cast<float>(classes) && v == std::floor(v),
                    ValueError, "target[{}] = {} is not a class index in [0, {})", i, v, classes);
    }
  }
}

void check_logits(const char* op, const Tensor& x, const Tensor& target, const char* what,
                  std::optional<int64_t> ignore_index = std::nullopt) {
  check_defined(op, x, what);
  check_defined(op, target, "target");
  KDP_CHECK_FOR(op, x.dim() == 2, ShapeError, "{} {} must be [batch, classes]", what,
                x.shape().str());
  check_same_device(op, x, what, target, "target");
  check_class_targets(op, target, x.size(0), x.size(1), ignore_index);
}

// Whether a host-memory target holds `value`.
bool holds(const Tensor& target, int64_t value) {
  if (!target.defined()) return false;
  const float* t = target.data();
  for (int64_t i = 0; i < target.numel(); ++i) {
    if (t[i] == static_cast<float>(value)) return true;
  }
  return false;
}

// For the weighted, ignoring losses: a target every row can gather (ignored
// rows take class 0), each row's weight (0 when ignored) and whether it counts.
void class_rows_kernel(const Device& device, View1 safe, View1 row_weight, View1 counts,
                       ConstView1 t, ConstView1 weight, bool has_weight, int64_t ignore_index,
                       int64_t classes) {
  Kokkos::parallel_for(
      "kdp::cross_entropy class weights",
      kdp::detail::range(device, static_cast<int64_t>(t.extent(0))),
      KOKKOS_LAMBDA(const int64_t b) {
        const float v = t(b);
        const bool ignored = v == static_cast<float>(ignore_index);
        const bool valid = !ignored && v >= 0.0f && v < static_cast<float>(classes);
        const int64_t c = valid ? static_cast<int64_t>(v) : 0;
        safe(b) = ignored ? 0.0f : v;  // an invalid class stays: nll_loss reports it (NaN)
        row_weight(b) = ignored ? 0.0f : (has_weight && valid ? weight(c) : 1.0f);
        counts(b) = ignored ? 0.0f : 1.0f;
      });
}

// The weighted, ignoring negative log-likelihood of log-probabilities `lp`,
// with PyTorch's label smoothing: everything through differentiable ops.
Tensor class_loss(const char* op, const Tensor& lp, const Tensor& t, const ClassLossOptions& o,
                  double smoothing) {
  const int64_t rows = lp.size(0), classes = lp.size(1);
  if (o.weight.defined()) {
    const Tensor& w = resolve(o.weight);
    KDP_CHECK_FOR(op, w.dim() == 1 && w.size(0) == classes, ShapeError,
                  "weight {} must be [{}], one per class", w.shape().str(), classes);
    check_same_device(op, lp, "input", w, "weight");
  }
  KDP_CHECK_FOR(op, smoothing >= 0.0 && smoothing <= 1.0, ValueError,
                "label_smoothing {} is not in [0, 1]", smoothing);
  const Device& dev = lp.device();
  Tensor safe = Tensor::empty(Shape{rows}, dev), row_weight = Tensor::empty(Shape{rows}, dev),
         counts = Tensor::empty(Shape{rows}, dev);
  class_rows_kernel(dev, safe.flat(), row_weight.flat(), counts.flat(), t.cflat(),
                    o.weight.defined() ? resolve(o.weight).cflat() : ConstView1(),
                    o.weight.defined(), o.ignore_index, classes);
  Tensor per_row = nll_loss(lp, safe, Reduction::None) * row_weight;
  if (smoothing > 0.0) {
    const Tensor weighted = o.weight.defined() ? lp * resolve(o.weight) : lp;
    const Tensor smooth = -sum(weighted, 1) * counts;
    per_row = per_row * static_cast<float>(1.0 - smoothing) +
              smooth * static_cast<float>(smoothing / static_cast<double>(classes));
  }
  switch (o.reduction) {
    case Reduction::None:
      return per_row;
    case Reduction::Sum:
      return sum(per_row);
    case Reduction::Mean:
      break;
  }
  return sum(per_row) / sum(row_weight);
}

// Per-row loss and the softmax of the logits (kept for backward, which then
// needs no exponentials).
void cross_entropy_kernel(const Device& device, View1 loss, View2 prob, ConstView2 x,
                          ConstView1 t) {
  const auto rows = static_cast<int64_t>(x.extent(0));
  const auto classes = static_cast<int64_t>(x.extent(1));
  // The loss of row b from its max m and the sum s of exp(x - m).
  auto row_loss = [=] KOKKOS_FUNCTION(const int64_t b, const float m, const float s) {
    const float target = t(b);
    const bool valid =
        target >= 0.0f && target < static_cast<float>(classes) && target == math::floor(target);
    return valid ? m + math::log(s) - x(b, static_cast<int64_t>(target)) : compat::quiet_nan();
  };
  if constexpr (compat::launches_are_synchronous()) {
    // Host backends: blocks of rows, whose exponentials are one loop over
    // contiguous memory; it vectorizes however few classes a row has.
    constexpr int64_t kBlock = 32;
    Kokkos::parallel_for(
        "kdp::cross_entropy", kdp::detail::range(device, (rows + kBlock - 1) / kBlock),
        KOKKOS_LAMBDA(const int64_t w) {
          const int64_t r0 = w * kBlock;
          const int64_t n = rows - r0 < kBlock ? rows - r0 : kBlock;
          float* __restrict p = &prob(r0, 0);
          float m[kBlock];
          for (int64_t r = 0; r < n; ++r) {
            const float* __restrict xr = &x(r0 + r, 0);
            float mr = xr[0];
            for (int64_t c = 1; c < classes; ++c) mr = xr[c] > mr ? xr[c] : mr;
            m[r] = mr;
            for (int64_t c = 0; c < classes; ++c) p[r * classes + c] = xr[c] - mr;
          }
          const int64_t len = n * classes;
          for (int64_t i = 0; i < len; ++i) p[i] = kdp::detail::vector_exp(p[i]);
          for (int64_t r = 0; r < n; ++r) {
            float* __restrict pr = p + r * classes;
            float s = 0.0f;
            for (int64_t c = 0; c < classes; ++c) s += pr[c];
            const float inv = 1.0f / s;
            for (int64_t c = 0; c < classes; ++c) pr[c] *= inv;
            loss(r0 + r) = row_loss(r0 + r, m[r], s);
          }
        });
  } else {
    Kokkos::parallel_for(
        "kdp::cross_entropy", kdp::detail::range(device, rows), KOKKOS_LAMBDA(const int64_t b) {
          const float* __restrict xr = &x(b, 0);
          float* __restrict pr = &prob(b, 0);
          float m = xr[0];
          for (int64_t c = 1; c < classes; ++c) m = xr[c] > m ? xr[c] : m;
          for (int64_t c = 0; c < classes; ++c) pr[c] = kdp::detail::vector_exp(xr[c] - m);
          float s = 0.0f;
          for (int64_t c = 0; c < classes; ++c) s += pr[c];
          const float inv = 1.0f / s;
          for (int64_t c = 0; c < classes; ++c) pr[c] *= inv;
          loss(b) = row_loss(b, m, s);
        });
  }
}

// gx[b, c] = gscale_b * (softmax(x)[b, c] - [c == t_b])
void cross_entropy_backward_kernel(const Device& device, View2 gx, ConstView2 prob, ConstView1 t,
                                   ConstView1 g, bool per_row, float scale) {
  kdp::detail::for_each_2d(
      "kdp::cross_entropy backward", device, static_cast<int64_t>(prob.extent(0)),
      static_cast<int64_t>(prob.extent(1)), KOKKOS_LAMBDA(const int64_t b, const int64_t c) {
        const float gs = (per_row ? g(b) : g(0)) * scale;
        gx(b, c) = gs * (prob(b, c) - (static_cast<float>(c) == t(b) ? 1.0f : 0.0f));
      });
}

void nll_kernel(const Device& device, View1 loss, ConstView2 lp, ConstView1 t) {
  const auto classes = static_cast<int64_t>(lp.extent(1));
  Kokkos::parallel_for(
      "kdp::nll_loss", kdp::detail::range(device, static_cast<int64_t>(lp.extent(0))),
      KOKKOS_LAMBDA(const int64_t b) {
        const float target = t(b);
        const bool valid =
            target >= 0.0f && target < static_cast<float>(classes) && target == math::floor(target);
        loss(b) = valid ? -lp(b, static_cast<int64_t>(target)) : compat::quiet_nan();
      });
}

void nll_backward_kernel(const Device& device, View2 gx, ConstView1 t, ConstView1 g, bool per_row,
                         float scale) {
  kdp::detail::for_each_2d(
      "kdp::nll_loss backward", device, static_cast<int64_t>(gx.extent(0)),
      static_cast<int64_t>(gx.extent(1)), KOKKOS_LAMBDA(const int64_t b, const int64_t c) {
        const float gs = (per_row ? g(b) : g(0)) * scale;
        gx(b, c) = static_cast<float>(c) == t(b) ? -gs : 0.0f;
      });
}

Tensor reduce_rows(const Tensor& per_row, Reduction reduction) {
  if (reduction == Reduction::None) return per_row;
  Tensor out = Tensor::empty(Shape{}, per_row.device());
  const double scale =
      reduction == Reduction::Mean ? 1.0 / static_cast<double>(per_row.numel()) : 1.0;
  sum_all_kernel(per_row.device(), out.flat(), per_row.cflat(), scale);
  return out;
}

float row_scale(Reduction reduction, int64_t rows) {
  return reduction == Reduction::Mean ? 1.0f / static_cast<float>(rows) : 1.0f;
}

class CrossEntropyNode : public autograd::Node {
 public:
  CrossEntropyNode(const Tensor& prob, const Tensor& t, Reduction r)
      : Node(prob.device()), prob_(prob), t_(t), reduction_(r) {}
  const char* name() const override { return "kdp::cross_entropy"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& prob = prob_.get(*this);
    Tensor gx = Tensor::empty(prob.shape(), device());
    cross_entropy_backward_kernel(device(), gx.matrix(), prob.cmatrix(), t_.get(*this).cflat(),
                                  grads[0].cflat(), reduction_ == Reduction::None,
                                  row_scale(reduction_, prob.size(0)));
    return {gx, Tensor()};
  }
  void release_saved() override {
    prob_.reset();
    t_.reset();
  }

 private:
  autograd::SavedTensor prob_, t_;
  Reduction reduction_;
};

class NllNode : public autograd::Node {
 public:
  NllNode(const Tensor& lp, const Tensor& t, Reduction r)
      : Node(lp.device()), shape_(lp.shape()), t_(t), reduction_(r) {}
  const char* name() const override { return "kdp::nll_loss"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor gx = Tensor::empty(shape_, device());
    nll_backward_kernel(device(), gx.matrix(), t_.get(*this).cflat(), grads[0].cflat(),
                        reduction_ == Reduction::None, row_scale(reduction_, shape_[0]));
    return {gx, Tensor()};
  }
  void release_saved() override { t_.reset(); }

 private:
  Shape shape_;
  autograd::SavedTensor t_;
  Reduction reduction_;
};

// The element-wise losses of an input and a target of one shape, as functions
// of d = input - target (PyTorch's definitions): the loss and its slope.
struct Pointwise {
  enum Kind { Mse, L1, SmoothL1, Huber } kind = Mse;
  double beta = 1.0;  // SmoothL1's beta, Huber's delta

  KOKKOS_INLINE_FUNCTION double value(double d) const {
    const double m = d < 0 ? -d : d;
    switch (kind) {
      case Mse:
        return d * d;
      case L1:
        return m;
      case SmoothL1:
        if (beta == 0.0) return m;
        return m < beta ? 0.5 * d * d / beta : m - 0.5 * beta;
      case Huber:
        return m < beta ? 0.5 * d * d : beta * (m - 0.5 * beta);
    }
    return 0.0;
  }
  KOKKOS_INLINE_FUNCTION float slope(float d) const {
    const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
    const auto b = static_cast<float>(beta);
    switch (kind) {
      case Mse:
        return 2.0f * d;
      case L1:
        return sign;
      case SmoothL1:
        return d <= -b || d >= b ? sign : d / b;  // beta 0: the sign
      case Huber:
        return d <= -b || d >= b ? b * sign : d;
    }
    return 0.0f;
  }
};

void pointwise_kernel(const char* name, const Device& device, View1 out, ConstView1 a, ConstView1 b,
                      Pointwise f) {
  Kokkos::parallel_for(
      name, kdp::detail::range(device, static_cast<int64_t>(a.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) {
        const float d = a(i) - b(i);
        out(i) = static_cast<float>(f.value(static_cast<double>(d)));
      });
}

void pointwise_sum_kernel(const char* name, const Device& device, View1 out, ConstView1 a,
                          ConstView1 b, double scale, Pointwise f) {
  kdp::detail::sum_into(
      name, device, out, static_cast<int64_t>(a.extent(0)), scale, KOKKOS_LAMBDA(const int64_t i) {
        return f.value(static_cast<double>(a(i)) - static_cast<double>(b(i)));
      });
}

// ga = gs f'(a - b), gb = -ga
void pointwise_backward_kernel(const Device& device, View1 ga, View1 gb, ConstView1 a, ConstView1 b,
                               ConstView1 g, bool per_element, float scale, bool want_a,
                               bool want_b, Pointwise f) {
  Kokkos::parallel_for(
      "kdp::pointwise_loss backward", kdp::detail::range(device, static_cast<int64_t>(a.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) {
        const float gs = (per_element ? g(i) : g(0)) * scale;
        const float v = gs * f.slope(a(i) - b(i));
        if (want_a) ga(i) = v;
        if (want_b) gb(i) = -v;
      });
}

class PointwiseNode : public autograd::Node {
 public:
  PointwiseNode(const char* name, const Tensor& a, const Tensor& b, Reduction r, Pointwise f)
      : Node(a.device()), name_(name), a_(a), b_(b), reduction_(r), f_(f) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& a = a_.get(*this);
    const Tensor& b = b_.get(*this);
    const bool want_a = next_edges()[0].valid();
    const bool want_b = next_edges()[1].valid();
    Tensor ga = want_a ? Tensor::empty(a.shape(), device()) : Tensor();
    Tensor gb = want_b ? Tensor::empty(b.shape(), device()) : Tensor();
    const float scale = reduction_ == Reduction::Mean ? 1.0f / static_cast<float>(a.numel()) : 1.0f;
    pointwise_backward_kernel(device(), want_a ? ga.flat() : View1(), want_b ? gb.flat() : View1(),
                              a.cflat(), b.cflat(), grads[0].cflat(), reduction_ == Reduction::None,
                              scale, want_a, want_b, f_);
    return {ga, gb};
  }
  void release_saved() override {
    a_.reset();
    b_.reset();
  }

 private:
  const char* name_;
  autograd::SavedTensor a_, b_;
  Reduction reduction_;
  Pointwise f_;
};

// An element-wise loss of `a` against `b` (one shape), reduced.
Tensor pointwise_loss(const char* op, const Tensor& a_in, const Tensor& b_in, Reduction reduction,
                      Pointwise f) {
  trace::Region region(op);
  const Tensor& a = resolve(a_in);
  const Tensor& b = resolve(b_in);
  check_defined(op, a, "input");
  check_defined(op, b, "target");
  KDP_CHECK_FOR(op, a.shape() == b.shape(), ShapeError,
                "input {} and target {} must have one shape", a.shape().str(), b.shape().str());
  check_same_device(op, a, "input", b, "target");
  KDP_CHECK_FOR(op, a.numel() != 0 || reduction != Reduction::Mean, ShapeError,
                "mean over an empty tensor");
  KDP_CHECK_FOR(op, std::isfinite(f.beta) && f.beta >= 0.0, ValueError,
                "beta (delta) {} must be finite and >= 0", f.beta);
  Tensor out;
  if (reduction == Reduction::None) {
    out = Tensor::empty(a.shape(), a.device());
    pointwise_kernel(op, a.device(), out.flat(), a.cflat(), b.cflat(), f);
  } else {
    out = Tensor::empty(Shape{}, a.device());
    const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(a.numel()) : 1.0;
    pointwise_sum_kernel(op, a.device(), out.flat(), a.cflat(), b.cflat(), scale, f);
  }
  if (autograd::needs_grad({&a, &b})) {
    auto node = std::make_shared<PointwiseNode>(op, a, b, reduction, f);
    node->set_next_edges({&a, &b});
    autograd::set_history(out, node);
  }
  return out;
}

// PyTorch's logits [N, C, d1, ..., dk] against targets [N, d1, ..., dk]
// (k >= 1) for `loss` on [rows, C] and [rows]: the classes moved last, the
// other dimensions flattened into rows; a per-element result (Reduction::None)
// comes back as [N, d1, ..., dk].
template <class Loss>
Tensor over_extra_dims(const char* op, const Tensor& x, const Tensor& t, Reduction reduction,
                       const Loss& loss) {
  std::vector<int64_t> want{x.size(0)};
  std::vector<int> order{0};
  for (int d = 2; d < x.dim(); ++d) {
    want.push_back(x.size(d));
    order.push_back(d);
  }
  order.push_back(1);
  KDP_CHECK_FOR(op, t.defined() && t.shape() == Shape(want), ShapeError,
                "logits {} are [N, C, d1, ...]: the targets must be {}, not {}", x.shape().str(),
                Shape(want).str(), t.defined() ? t.shape().str() : "undefined");
  const int64_t rows = Shape(want).numel();
  Tensor out = loss(permute(x, order).reshape({rows, x.size(1)}), t.reshape({rows}));
  return reduction == Reduction::None ? out.reshape(want) : out;
}

}  // namespace ops_detail

using namespace ops_detail;

Tensor cross_entropy(const Tensor& x_in, const Tensor& t_in, Reduction reduction) {
  trace::Region region("kdp::cross_entropy");
  const Tensor& x = resolve(x_in);
  const Tensor& t = resolve(t_in);
  if (x.defined() && x.dim() > 2) {
    return over_extra_dims(
        "kdp::cross_entropy", x, t, reduction,
        [&](const Tensor& xr, const Tensor& tr) { return cross_entropy(xr, tr, reduction); });
  }
  check_logits("kdp::cross_entropy", x, t, "logits");
  KDP_CHECK(x.size(1) != 0, ShapeError, "logits {} have no classes", x.shape().str());
  KDP_CHECK(x.size(0) != 0 || reduction != Reduction::Mean, ShapeError, "mean over an empty batch");
  Tensor per_row = Tensor::empty(Shape{x.size(0)}, x.device());
  Tensor prob = Tensor::empty(x.shape(), x.device());
  cross_entropy_kernel(x.device(), per_row.flat(), prob.matrix(), x.cmatrix(), t.cflat());
  Tensor out = reduce_rows(per_row, reduction);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<CrossEntropyNode>(prob, t, reduction);
    node->set_next_edges({&x, &t});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor nll_loss(const Tensor& lp_in, const Tensor& t_in, Reduction reduction) {
  trace::Region region("kdp::nll_loss");
  const Tensor& lp = resolve(lp_in);
  const Tensor& t = resolve(t_in);
  check_logits("kdp::nll_loss", lp, t, "log_probs");
  KDP_CHECK(lp.size(0) != 0 || reduction != Reduction::Mean, ShapeError,
            "mean over an empty batch");
  Tensor per_row = Tensor::empty(Shape{lp.size(0)}, lp.device());
  nll_kernel(lp.device(), per_row.flat(), lp.cmatrix(), t.cflat());
  Tensor out = reduce_rows(per_row, reduction);
  if (autograd::needs_grad({&lp})) {
    auto node = std::make_shared<NllNode>(lp, t, reduction);
    node->set_next_edges({&lp, &t});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor cross_entropy(const Tensor& x_in, const Tensor& t_in, const ClassLossOptions& options) {
  trace::Region region("kdp::cross_entropy");
  if (resolve(x_in).defined() && resolve(x_in).dim() > 2) {
    return over_extra_dims(
        "kdp::cross_entropy", resolve(x_in), resolve(t_in), options.reduction,
        [&](const Tensor& xr, const Tensor& tr) { return cross_entropy(xr, tr, options); });
  }
  // No weight and no smoothing: the fused kernels, unless a row is ignored
  // (checked on host backends; on a GPU the general path always).
  const bool plain = !options.weight.defined() && options.label_smoothing == 0.0 &&
                     compat::host_accessible_memory() &&
                     !holds(resolve(t_in), options.ignore_index);
  if (plain) return cross_entropy(x_in, t_in, options.reduction);
  const Tensor& x = resolve(x_in);
  const Tensor& t = resolve(t_in);
  check_logits("kdp::cross_entropy", x, t, "logits", options.ignore_index);
  KDP_CHECK(x.size(1) != 0, ShapeError, "logits {} have no classes", x.shape().str());
  return class_loss("kdp::cross_entropy", log_softmax(x, 1), t, options, options.label_smoothing);
}

Tensor nll_loss(const Tensor& lp_in, const Tensor& t_in, const ClassLossOptions& options) {
  trace::Region region("kdp::nll_loss");
  const Tensor& lp = resolve(lp_in);
  const Tensor& t = resolve(t_in);
  check_logits("kdp::nll_loss", lp, t, "log_probs", options.ignore_index);
  KDP_CHECK(options.label_smoothing == 0.0, ValueError, "label_smoothing belongs to cross_entropy");
  return class_loss("kdp::nll_loss", lp, t, options, 0.0);
}

Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  return pointwise_loss("kdp::mse_loss", a, b, reduction, {Pointwise::Mse});
}

Tensor l1_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  return pointwise_loss("kdp::l1_loss", a, b, reduction, {Pointwise::L1});
}

Tensor smooth_l1_loss(const Tensor& a, const Tensor& b, Reduction reduction, double beta) {
  return pointwise_loss("kdp::smooth_l1_loss", a, b, reduction, {Pointwise::SmoothL1, beta});
}

Tensor huber_loss(const Tensor& a, const Tensor& b, Reduction reduction, double delta) {
  return pointwise_loss("kdp::huber_loss", a, b, reduction, {Pointwise::Huber, delta});
}

}  // namespace kdp
