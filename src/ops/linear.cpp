#include "kdp/ops/linear.hpp"

#include <algorithm>
#include <utility>

#include "autograd/accumulate_grad.hpp"
#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/ops/shape.hpp"
#include "kernels/gemm.hpp"
#include "kernels/product_policy.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

void fill_rows(const Device& device, View2 out, ConstView1 row) {
  kdp::detail::for_each_2d(
      "kdp::linear bias", device, static_cast<int64_t>(out.extent(0)),
      static_cast<int64_t>(out.extent(1)),
      KOKKOS_LAMBDA(const int64_t r, const int64_t c) { out(r, c) = row(c); });
}

// What the backward of a linear layer (plain or followed by a ReLU) keeps and
// shares: the input and the weight (each only when the other's gradient is
// wanted), the GEMMs, and the gradients in edge order.
class LinearNodeBase : public autograd::Node {
 public:
  LinearNodeBase(const Tensor& x, const Tensor& weight, bool has_bias)
      : Node(x.device()),
        x_shape_(x.shape()),
        x_(weight.requires_grad() ? autograd::SavedTensor(x) : autograd::SavedTensor()),
        weight_(x.requires_grad() ? autograd::SavedTensor(weight) : autograd::SavedTensor()),
        has_bias_(has_bias),
        precision_(autocast_precision()) {}
  void release_saved() override {
    x_.reset();
    weight_.reset();
  }

 protected:
  // The output gradient as [rows, out_features].
  static std::pair<int64_t, int64_t> rows_and_features(const Tensor& g) {
    const int64_t out_f = g.shape()[g.dim() - 1];
    return {out_f == 0 ? 0 : g.numel() / out_f, out_f};
  }
  bool wants_bias() const { return has_bias_ && next_edges()[2].valid(); }

  // From g (as gm [rows, out]), the gradient before the layer's own op:
  // gx = gm W for the input and gw = gm^T x for the weight, each only when its
  // edge wants it; with gb, the gradients in edge order.
  std::vector<Tensor> gradients(const Tensor& g, Tensor gb) const {
    const auto [rows, out_f] = rows_and_features(g);
    const ConstView2 gm = g.cmatrix(rows, out_f);
    Tensor gx, gw;
    if (next_edges()[0].valid()) {
      const Tensor& w = weight_.get(*this);
      gx = Tensor::empty(x_shape_, device());
      detail::gemm(device(), "N", "N", 1.0f, gm, w.cmatrix(), 0.0f, gx.matrix(rows, w.size(1)),
                   precision_);
    }
    if (auto* policy = kdp::detail::product_policy()) {
      if (offer_gradients(*policy, g)) {
        if (has_bias_) return {gx, Tensor(), Tensor()};
        return {gx, Tensor()};
      }
    }
    if (next_edges()[1].valid()) {
      const Tensor& x = x_.get(*this);
      const int64_t in_f = x.numel() / (rows == 0 ? 1 : rows);
      gw = Tensor::empty(Shape{out_f, in_f}, device());
      detail::gemm(device(), "T", "N", 1.0f, gm, x.cmatrix(rows, in_f), 0.0f, gw.matrix(),
                   precision_);
    }
    if (has_bias_) return {gx, gw, gb};
    return {gx, gw};
  }

  // Offers the products of the weight's and the bias's gradients to the
  // thread's product policy (reproducible mode's whole batch, which makes
  // each shard's from its own rows); false where it takes neither (they are
  // summed as usual).
  bool offer_gradients(kdp::detail::ProductPolicy& policy, const Tensor& dy) const {
    const TensorImpl* weight = leaf(1);
    const TensorImpl* bias = has_bias_ ? leaf(2) : nullptr;
    const int64_t rows = rows_and_features(dy).first;
    KDP_CHECK(rows == policy.batch_rows(), StateError,
              "{}: a batch of {} rows, but reproducible mode's shards hold {}", name(), rows,
              policy.batch_rows());
    return policy.take_linear_gradients(weight, bias, dy,
                                        weight != nullptr ? x_.get(*this) : Tensor(), precision_);
  }
  // The leaf at edge `edge`, or null (the edge leads elsewhere).
  const TensorImpl* leaf(size_t edge) const {
    const auto* acc = dynamic_cast<const autograd::AccumulateGrad*>(next_edges()[edge].node.get());
    return acc == nullptr ? nullptr : acc->leaf().get();
  }

 private:
  Shape x_shape_;
  autograd::SavedTensor x_, weight_;
  bool has_bias_;
  Precision precision_;  // the forward's, for the backward's products
};

class LinearNode : public LinearNodeBase {
 public:
  using LinearNodeBase::LinearNodeBase;
  const char* name() const override { return "kdp::linear"; }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const auto [rows, out_f] = rows_and_features(g);
    Tensor gb;
    if (wants_bias()) {
      gb = Tensor::empty(Shape{out_f}, device());
      sum_dim_kernel(device(), gb.flat(), g.cflat(), DimSplit{1, rows, out_f}, 1.0f);
    }
    return gradients(g, gb);
  }
};

// a times b for a batch of `batch` products [n, k] x [k, m] (matmul: one;
// bmm: a [B, n, k], b [B, k, m]): ga_i = g_i b_i^T, gb_i = a_i^T g_i.
class ProductNode : public autograd::Node {
 public:
  ProductNode(const char* name, const Tensor& a, const Tensor& b, int64_t batch)
      : Node(a.device()),
        name_(name),
        a_(b.requires_grad() ? autograd::SavedTensor(a) : autograd::SavedTensor()),
        b_(a.requires_grad() ? autograd::SavedTensor(b) : autograd::SavedTensor()),
        a_shape_(a.shape()),
        b_shape_(b.shape()),
        batch_(batch),
        precision_(autocast_precision()) {}
  const char* name() const override { return name_; }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const int64_t n = a_shape_.size(-2), k = a_shape_.size(-1), m = b_shape_.size(-1);
    Tensor ga, gb;
    if (next_edges()[0].valid()) {
      ga = Tensor::empty(a_shape_, device());
      detail::batched_gemm(device(), "N", "T", batch_, 1.0f, g.data(), n, m, b_.get(*this).data(),
                           k, m, 0.0f, ga.data(), n, k, precision_);
    }
    if (next_edges()[1].valid()) {
      gb = Tensor::empty(b_shape_, device());
      detail::batched_gemm(device(), "T", "N", batch_, 1.0f, a_.get(*this).data(), n, k, g.data(),
                           n, m, 0.0f, gb.data(), k, m, precision_);
    }
    return {ga, gb};
  }
  void release_saved() override {
    a_.reset();
    b_.reset();
  }

 private:
  const char* name_;
  autograd::SavedTensor a_, b_;
  Shape a_shape_, b_shape_;
  int64_t batch_;
  Precision precision_;
};

// y = max(y + bias, 0), the forward epilogue of linear_relu.
void bias_relu(const Device& device, View2 y, ConstView1 bias, bool has_bias) {
  kdp::detail::for_each_2d(
      "kdp::linear_relu bias+relu", device, static_cast<int64_t>(y.extent(0)),
      static_cast<int64_t>(y.extent(1)), KOKKOS_LAMBDA(const int64_t r, const int64_t c) {
        const float v = y(r, c) + (has_bias ? bias(c) : 0.0f);
        y(r, c) = v <= 0.0f ? 0.0f : v;  // NaN stays NaN, as relu()
      });
}

// gz = g where y > 0 (else 0), and gb = the column sums of gz when wanted. On
// host backends both in one pass, in blocks of columns that each walk every
// row (the same order of additions as sum_dim_kernel).
void relu_grad_and_bias(const Device& device, View2 gz, View1 gb, ConstView2 g, ConstView2 y,
                        bool want_bias) {
  const auto rows = static_cast<int64_t>(g.extent(0));
  const auto cols = static_cast<int64_t>(g.extent(1));
  if constexpr (compat::launches_are_synchronous()) {
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (cols + kBlock - 1) / kBlock;
    Kokkos::parallel_for(
        "kdp::linear_relu backward", kdp::detail::range(device, blocks),
        KOKKOS_LAMBDA(const int64_t w) {
          const int64_t c0 = w * kBlock;
          const int64_t width = cols - c0 < kBlock ? cols - c0 : kBlock;
          float acc[kBlock] = {};
          for (int64_t r = 0; r < rows; ++r) {
            const float* __restrict gr = &g(r, c0);
            const float* __restrict yr = &y(r, c0);
            float* __restrict zr = &gz(r, c0);
            for (int64_t k = 0; k < width; ++k) {
              const float gv = gr[k];  // read whatever the mask says: a select, no branch
              const float v = yr[k] > 0.0f ? gv : 0.0f;
              zr[k] = v;
              acc[k] += v;
            }
          }
          if (want_bias) {
            for (int64_t k = 0; k < width; ++k) gb(c0 + k) = acc[k];
          }
        });
  } else {
    kdp::detail::for_each_2d(
        "kdp::linear_relu backward", device, rows, cols,
        KOKKOS_LAMBDA(const int64_t r, const int64_t c) {
          gz(r, c) = y(r, c) > 0.0f ? g(r, c) : 0.0f;
        });
    if (want_bias) {
      sum_dim_kernel(device, gb, View1(gz.data(), gz.size()), DimSplit{1, rows, cols}, 1.0f);
    }
  }
}

class LinearReluNode : public LinearNodeBase {
 public:
  LinearReluNode(const Tensor& x, const Tensor& weight, const Tensor& y, bool has_bias)
      : LinearNodeBase(x, weight, has_bias), y_(y) {}
  const char* name() const override { return "kdp::linear_relu"; }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const auto [rows, out_f] = rows_and_features(g);
    const bool want_bias = wants_bias();
    Tensor gz = Tensor::empty(Shape{rows, out_f}, device());
    Tensor gb = want_bias ? Tensor::empty(Shape{out_f}, device()) : Tensor();
    relu_grad_and_bias(device(), gz.matrix(), want_bias ? gb.flat() : View1(),
                       g.cmatrix(rows, out_f), y_.get(*this).cmatrix(rows, out_f), want_bias);
    return gradients(gz, gb);
  }
  void release_saved() override {
    LinearNodeBase::release_saved();
    y_.reset();
  }

 private:
  autograd::SavedTensor y_;
};

// The checks of linear(): names the op, the input, the weight and the bias.
void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  check_defined(op, x, "input");
  check_defined(op, w, "weight");
  KDP_CHECK_FOR(op, w.dim() == 2, ShapeError, "weight {} must be [out_features, in_features]",
                w.describe());
  const int64_t out_f = w.size(0);
  const int64_t in_f = w.size(1);
  KDP_CHECK_FOR(op, x.dim() != 0 && x.size(-1) == in_f, ShapeError,
                "input {} has {} features in its last dimension but weight {} expects {}",
                x.shape().str(), x.dim() == 0 ? 0 : x.size(-1), w.shape().str(), in_f);
  KDP_CHECK_FOR(op, !b.defined() || (b.dim() == 1 && b.size(0) == out_f), ShapeError,
                "bias {} does not match weight {} (needs [{}])", b.shape().str(), w.shape().str(),
                out_f);
  check_same_device(op, x, "input", w, "weight");
  if (b.defined()) check_same_device(op, x, "input", b, "bias");
}

// What linear() and linear_relu() share: the checked operands, the product's
// rows, and the output [..., out_features] with its matrix view.
struct LinearProduct {
  Tensor x, w, b;
  int64_t rows = 0, in_f = 0, out_f = 0;
  Tensor out;
  View2 y;
};

LinearProduct start_linear(const char* op, const Tensor& x_in, const Tensor& w_in,
                           const Tensor& b_in) {
  LinearProduct p;
  p.x = resolve(x_in);
  p.w = resolve(w_in);
  p.b = resolve(b_in);
  check_linear(op, p.x, p.w, p.b);
  p.out_f = p.w.size(0);
  p.in_f = p.w.size(1);
  p.rows = p.in_f == 0 ? p.x.numel() : p.x.numel() / p.in_f;
  p.out = Tensor::empty(p.x.shape().with(-1, p.out_f), p.x.device());
  p.y = p.out.matrix(p.rows, p.out_f);
  return p;
}

// The output's history: `make_node()` when a gradient is wanted, its edges to
// the operands there are.
template <class MakeNode>
void record(const LinearProduct& p, MakeNode make_node) {
  if (!autograd::needs_grad({&p.x, &p.w, &p.b})) return;
  auto node = make_node();
  if (p.b.defined()) {
    node->set_next_edges({&p.x, &p.w, &p.b});
  } else {
    node->set_next_edges({&p.x, &p.w});
  }
  autograd::set_history(p.out, node);
}

}  // namespace ops_detail

using namespace ops_detail;

Tensor linear_relu(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  trace::Region region("kdp::linear_relu");
  LinearProduct p = start_linear("kdp::linear_relu", x_in, w_in, b_in);
  const Device& dev = p.x.device();
  detail::gemm(dev, "N", "T", 1.0f, p.x.cmatrix(p.rows, p.in_f), p.w.cmatrix(), 0.0f, p.y);
  bias_relu(dev, p.y, p.b.defined() ? p.b.cflat() : ConstView1(), p.b.defined());
  record(p, [&] { return std::make_shared<LinearReluNode>(p.x, p.w, p.out, p.b.defined()); });
  return p.out;
}

namespace {

// a [n, k] times b [k, m] (checked by the caller).
Tensor matmul_2d(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(Shape{a.size(0), b.size(1)}, a.device());
  detail::gemm(a.device(), "N", "N", 1.0f, a.cmatrix(), b.cmatrix(), 0.0f, out.matrix());
  if (autograd::needs_grad({&a, &b})) {
    auto node = std::make_shared<ProductNode>("kdp::matmul", a, b, 1);
    node->set_next_edges({&a, &b});
    autograd::set_history(out, node);
  }
  return out;
}

std::vector<int64_t> leading(const Shape& s) {
  std::vector<int64_t> dims = s.to_vector();
  dims.resize(dims.size() - 2);
  return dims;
}

std::vector<int64_t> with_matrix(std::vector<int64_t> batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  trace::Region region("kdp::matmul");
  const Tensor& a = resolve(a_in);
  const Tensor& b = resolve(b_in);
  check_defined("kdp::matmul", a, "a");
  check_defined("kdp::matmul", b, "b");
  check_same_device("kdp::matmul", a, "a", b, "b");
  KDP_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError,
            "needs operands of at least 1 dimension; got a {} and b {}", a.shape().str(),
            b.shape().str());
  if (a.dim() == 2 && b.dim() == 2) {
    KDP_CHECK(a.size(1) == b.size(0), ShapeError, "needs a [n, k] and b [k, m]; got a {} and b {}",
              a.shape().str(), b.shape().str());
    return matmul_2d(a, b);
  }
  // A vector's dimension joins as a matrix's and leaves the result.
  if (a.dim() == 1 && b.dim() == 1) {
    KDP_CHECK(a.size(0) == b.size(0), ShapeError, "the vectors a {} and b {} differ in length",
              a.shape().str(), b.shape().str());
    return matmul_2d(unsqueeze(a, 0), unsqueeze(b, 1)).reshape({});
  }
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  KDP_CHECK(b.size(-2) == k, ShapeError,
            "a {} has {} columns but b {} has {} rows (a [..., n, k] times b [..., k, m])",
            a.shape().str(), k, b.shape().str(), b.size(-2));
  if (b.dim() == 2) {  // the batch's rows stacked: one product
    const std::vector<int64_t> batch = leading(a.shape());
    int64_t rows = n;
    for (int64_t d : batch) rows *= d;
    return matmul_2d(a.reshape({rows, k}), b).reshape(with_matrix(batch, n, m));
  }
  const Shape batch =
      broadcast_shapes("kdp::matmul", Shape(leading(a.shape())), Shape(leading(b.shape())));
  const std::vector<int64_t> dims = batch.to_vector();
  const int64_t count = batch.numel();
  const Tensor ab = expand(a, with_matrix(dims, n, k)).reshape({count, n, k});
  const Tensor bb = expand(b, with_matrix(dims, k, m)).reshape({count, k, m});
  return bmm(ab, bb).reshape(with_matrix(dims, n, m));
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  trace::Region region("kdp::bmm");
  const Tensor& a = resolve(a_in);
  const Tensor& b = resolve(b_in);
  check_defined("kdp::bmm", a, "a");
  check_defined("kdp::bmm", b, "b");
  KDP_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
            ShapeError, "needs a [B, n, k] and b [B, k, m]; got a {} and b {}", a.shape().str(),
            b.shape().str());
  check_same_device("kdp::bmm", a, "a", b, "b");
  const int64_t batch = a.size(0), n = a.size(1), k = a.size(2), m = b.size(2);
  Tensor out = Tensor::empty(Shape{batch, n, m}, a.device());
  detail::batched_gemm(a.device(), "N", "N", batch, 1.0f, a.data(), n, k, b.data(), k, m, 0.0f,
                       out.data(), n, m);
  if (autograd::needs_grad({&a, &b})) {
    auto node = std::make_shared<ProductNode>("kdp::bmm", a, b, batch);
    node->set_next_edges({&a, &b});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  trace::Region region("kdp::linear");
  LinearProduct p = start_linear("kdp::linear", x_in, w_in, b_in);
  const Device& dev = p.x.device();
  float beta = 0.0f;
  if (p.b.defined()) {  // the bias rows first, then the product added to them
    fill_rows(dev, p.y, p.b.cflat());
    beta = 1.0f;
  }
  detail::gemm(dev, "N", "T", 1.0f, p.x.cmatrix(p.rows, p.in_f), p.w.cmatrix(), beta, p.y);
  record(p, [&] { return std::make_shared<LinearNode>(p.x, p.w, p.b.defined()); });
  return p.out;
}

}  // namespace kdp
