#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/ops/normalization.hpp"
#include "op_util.hpp"
#include "ops/batch_norm_kernels.hpp"

namespace kdp {

namespace ops_detail {

namespace {

// The backward of batch_norm on one device.
class BatchNormNode : public autograd::Node {
 public:
  BatchNormNode(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                const Tensor& bias, const bn::Layout& layout, bool batch_statistics, bool relu)
      : Node(x.device()),
        x_(x),
        mean_(mean),
        invstd_(invstd),
        weight_(weight),
        bias_(bias),
        layout_(layout),
        batch_statistics_(batch_statistics),
        relu_(relu) {}
  const char* name() const override { return relu_ ? "kdp::batch_norm_relu" : "kdp::batch_norm"; }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Device& dev = device();
    const Tensor& x = x_.get(*this);
    const Tensor& mean = mean_.get(*this);
    const Tensor& invstd = invstd_.get(*this);
    const bool affine = weight_.defined();
    const Tensor& dy = grads[0];
    const ConstView1 gamma = affine ? weight_.get(*this).cflat() : ConstView1();
    // With a fused ReLU, dy counts where its output was positive.
    bn::FusedRelu relu;
    relu.on = relu_;
    relu.affine = affine;
    relu.gamma = gamma;
    if (relu_ && affine) relu.beta = bias_.get(*this).cflat();
    bn::DoubleBuffer gsums(2 * layout_.c, dev);
    bn::gradient_sums(dev, gsums.view, dy.cflat(), x.cflat(), mean.cflat(), invstd.cflat(), layout_,
                      relu);
    Tensor dx, dw, db;
    if (next_edges()[0].valid()) {
      dx = Tensor::empty(x.shape(), dev);
      bn::input_gradient(dev, dx.flat(), dy.cflat(), x.cflat(), mean.cflat(), invstd.cflat(), gamma,
                         affine, gsums.view, static_cast<double>(layout_.count()),
                         batch_statistics_, layout_, relu);
    }
    if (affine && (next_edges()[1].valid() || next_edges()[2].valid())) {
      dw = Tensor::empty(Shape{layout_.c}, dev);
      db = Tensor::empty(Shape{layout_.c}, dev);
      bn::parameter_gradients(dev, dw.flat(), db.flat(), gsums.view, layout_.c);
    }
    return {dx, dw, db};
  }
  void release_saved() override {
    x_.reset();
    mean_.reset();
    invstd_.reset();
    weight_.reset();
    bias_.reset();
  }

 private:
  autograd::SavedTensor x_, mean_, invstd_, weight_, bias_;
  bn::Layout layout_;
  bool batch_statistics_;
  bool relu_;
};

void check_channel_vector(const char* op, const Tensor& t, const char* what, const Tensor& x,
                          int64_t channels) {
  if (!t.defined()) return;
  KDP_CHECK_FOR(op, t.dim() == 1 && t.size(0) == channels, ShapeError,
                "{} {} is not [{}] for the input {}", what, t.shape().str(), channels,
                x.shape().str());
  check_same_device(op, x, "input", t, what);
}

}  // namespace

}  // namespace ops_detail

using namespace ops_detail;

namespace ops_detail {
namespace {

Tensor normalization(const char* op, bool relu, const Tensor& input, const Tensor& running_mean_in,
                     const Tensor& running_var_in, const Tensor& weight_in, const Tensor& bias_in,
                     bool training, double momentum, double eps) {
  trace::Region region(op);
  const Tensor& x = resolve(input);
  const Tensor& rm = resolve(running_mean_in);
  const Tensor& rv = resolve(running_var_in);
  const Tensor& w = resolve(weight_in);
  const Tensor& b = resolve(bias_in);
  check_defined(op, x, "input");
  const bn::Layout l = bn::layout_of(op, x, 0);
  for (const auto& [t, what] : {std::pair<const Tensor*, const char*>{&rm, "running_mean"},
                                {&rv, "running_var"},
                                {&w, "weight"},
                                {&b, "bias"}}) {
    check_channel_vector(op, *t, what, x, l.c);
  }
  KDP_CHECK_FOR(op, w.defined() == b.defined(), ValueError,
                "weight and bias go together (affine), or neither");
  KDP_CHECK_FOR(op, rm.defined() == rv.defined(), ValueError,
                "running_mean and running_var go together, or neither");
  KDP_CHECK_FOR(op, training || rm.defined(), ValueError, "evaluation needs running statistics");
  KDP_CHECK_FOR(op, !training || l.count() > 1, ValueError,
                "expected more than 1 value per channel when training, got input {}",
                x.shape().str());
  const Device& dev = x.device();
  Tensor mean = Tensor::empty(Shape{l.c}, dev), invstd = Tensor::empty(Shape{l.c}, dev);
  if (training) {
    bn::DoubleBuffer sums(2 * l.c, dev);
    bn::channel_sums(dev, sums.view, x.cflat(), l);
    bn::statistics(dev, mean.flat(), invstd.flat(), sums.view, static_cast<double>(l.count()), eps,
                   rm.defined() ? rm.flat() : View1(), rv.defined() ? rv.flat() : View1(),
                   rm.defined(), momentum, l.c);
    if (rm.defined()) {
      rm.mark_written();
      rv.mark_written();
    }
  } else {
    bn::running_statistics(dev, mean.flat(), invstd.flat(), rm.cflat(), rv.cflat(), eps, l.c);
  }
  Tensor y = Tensor::empty(x.shape(), dev);
  bn::normalize(dev, y.flat(), x.cflat(), mean.cflat(), invstd.cflat(),
                w.defined() ? w.cflat() : ConstView1(), b.defined() ? b.cflat() : ConstView1(),
                w.defined(), l, relu);
  if (autograd::needs_grad({&x, &w, &b})) {
    auto node =
        std::make_shared<BatchNormNode>(x, mean, invstd, w, relu ? b : Tensor(), l, training, relu);
    node->set_next_edges({&x, &w, &b});
    autograd::set_history(y, node);
  }
  return y;
}

}  // namespace
}  // namespace ops_detail

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  return normalization("kdp::batch_norm", false, input, running_mean, running_var, weight, bias,
                       training, momentum, eps);
}

Tensor batch_norm_relu(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps) {
  return normalization("kdp::batch_norm_relu", true, input, running_mean, running_var, weight, bias,
                       training, momentum, eps);
}

}  // namespace kdp
