#include "kdp/ops/reduction.hpp"

#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/core/trace.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

Shape reduced_shape(const Shape& s, int dim, bool keepdim) {
  std::vector<int64_t> dims;
  for (int d = 0; d < s.rank(); ++d) {
    if (d == dim) {
      if (keepdim) dims.push_back(1);
    } else {
      dims.push_back(s[d]);
    }
  }
  return Shape(dims);
}

// Whole-tensor sum in double (a float running sum over millions of elements
// loses digits), written into a scalar tensor.
void sum_all_kernel(const Device& device, View1 out, ConstView1 x, double scale) {
  kdp::detail::sum_into(
      "kdp::sum", device, out, static_cast<int64_t>(x.extent(0)), scale,
      KOKKOS_LAMBDA(const int64_t i) { return static_cast<double>(x(i)); });
}

// out[o, i] = scale * sum_d x[o, d, i]. Each work item handles a block of up to
// 16 neighbouring `inner` positions so that rows are read contiguously.
void sum_dim_kernel(const Device& device, View1 out, ConstView1 x, DimSplit s, float scale) {
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  Kokkos::parallel_for(
      "kdp::sum_dim", kdp::detail::range(device, s.outer * blocks), KOKKOS_LAMBDA(const int64_t w) {
        const int64_t o = w / blocks;
        const int64_t i0 = (w % blocks) * kBlock;
        const int64_t width = (s.inner - i0) < kBlock ? (s.inner - i0) : kBlock;
        float acc[kBlock] = {};
        for (int64_t d = 0; d < s.size; ++d) {
          const int64_t row = (o * s.size + d) * s.inner + i0;
          for (int64_t k = 0; k < width; ++k) acc[k] += x(row + k);
        }
        for (int64_t k = 0; k < width; ++k) out(o * s.inner + i0 + k) = acc[k] * scale;
      });
}

// gx[o, d, i] = scale * g[o, i]
void expand_dim_kernel(const Device& device, View1 gx, ConstView1 g, DimSplit s, float scale) {
  kdp::detail::for_each_2d(
      "kdp::sum_dim backward", device, s.outer * s.size, s.inner,
      KOKKOS_LAMBDA(const int64_t r, const int64_t i) {
        gx(r * s.inner + i) = scale * g((r / s.size) * s.inner + i);
      });
}

void max_dim_kernel(const Device& device, View1 values, View1 indices, ConstView1 x, DimSplit s) {
  Kokkos::parallel_for(
      "kdp::max_dim", kdp::detail::range(device, s.outer * s.inner),
      KOKKOS_LAMBDA(const int64_t j) {
        const int64_t o = j / s.inner;
        const int64_t i = j % s.inner;
        const int64_t base = o * s.size * s.inner + i;
        float best = x(base);
        int64_t arg = 0;
        for (int64_t d = 1; d < s.size; ++d) {
          const float v = x(base + d * s.inner);
          if (v > best || (v != v && best == best)) {  // NaN wins, as in PyTorch
            best = v;
            arg = d;
          }
        }
        values(j) = best;
        indices(j) = static_cast<float>(arg);
      });
}

void max_dim_backward_kernel(const Device& device, View1 gx, ConstView1 g, ConstView1 indices,
                             DimSplit s) {
  Kokkos::parallel_for(
      "kdp::max_dim backward", kdp::detail::range(device, static_cast<int64_t>(gx.extent(0))),
      KOKKOS_LAMBDA(const int64_t j) {
        const int64_t i = j % s.inner;
        const int64_t d = (j / s.inner) % s.size;
        const int64_t o = j / (s.inner * s.size);
        const int64_t r = o * s.inner + i;
        gx(j) = static_cast<int64_t>(indices(r)) == d ? g(r) : 0.0f;
      });
}

class SumAllNode : public autograd::Node {
 public:
  SumAllNode(const Tensor& x, float scale, const char* name)
      : Node(x.device()), shape_(x.shape()), scale_(scale), name_(name) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    // The gradient of a scalar output is one number; broadcast it.
    Tensor gx = Tensor::empty(shape_, device());
    DimSplit s{1, shape_.numel(), 1};
    expand_dim_kernel(device(), gx.flat(), grads[0].cflat(), s, scale_);
    return {gx};
  }

 private:
  Shape shape_;
  float scale_;
  const char* name_;
};

class SumDimNode : public autograd::Node {
 public:
  SumDimNode(const Tensor& x, DimSplit split, float scale, const char* name)
      : Node(x.device()), shape_(x.shape()), split_(split), scale_(scale), name_(name) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor gx = Tensor::empty(shape_, device());
    expand_dim_kernel(device(), gx.flat(), grads[0].cflat(), split_, scale_);
    return {gx};
  }

 private:
  Shape shape_;
  DimSplit split_;
  float scale_;
  const char* name_;
};

class MaxDimNode : public autograd::Node {
 public:
  MaxDimNode(const Tensor& x, DimSplit split, const Tensor& indices)
      : Node(x.device()), shape_(x.shape()), split_(split), indices_(indices) {}
  const char* name() const override { return "kdp::max"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor gx = Tensor::empty(shape_, device());
    max_dim_backward_kernel(device(), gx.flat(), grads[0].cflat(), indices_.get(*this).cflat(),
                            split_);
    return {gx};
  }
  void release_saved() override { indices_.reset(); }

 private:
  Shape shape_;
  DimSplit split_;
  autograd::SavedTensor indices_;
};

Tensor reduce_all(const char* name, const Tensor& x_in, bool average) {
  trace::Region region(name);
  const Tensor& x = resolve(x_in);
  check_defined(name, x, "input");
  KDP_CHECK_FOR(name, !average || x.numel() != 0, ShapeError, "mean of an empty tensor {}",
                x.shape().str());
  const double scale = average ? 1.0 / static_cast<double>(x.numel()) : 1.0;
  Tensor out = Tensor::empty(Shape{}, x.device());
  sum_all_kernel(x.device(), out.flat(), x.cflat(), scale);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SumAllNode>(x, static_cast<float>(scale), name);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor reduce_dim(const char* name, const Tensor& x_in, int dim, bool keepdim, bool average) {
  trace::Region region(name);
  const Tensor& x = resolve(x_in);
  check_defined(name, x, "input");
  KDP_CHECK_FOR(name, x.dim() != 0, ShapeError, "cannot reduce a scalar along dimension {}", dim);
  int d = 0;
  try {
    d = x.shape().normalize_dim(dim);
  } catch (const ShapeError& e) {
    KDP_FAIL_FOR(name, ShapeError, "{}", e.what());
  }
  const DimSplit split = split_at(x.shape(), d);
  KDP_CHECK_FOR(name, !average || split.size != 0, ShapeError, "mean over an empty dimension of {}",
                x.shape().str());
  const float scale = average ? 1.0f / static_cast<float>(split.size) : 1.0f;
  Tensor out = Tensor::empty(reduced_shape(x.shape(), d, keepdim), x.device());
  sum_dim_kernel(x.device(), out.flat(), x.cflat(), split, scale);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SumDimNode>(x, split, scale, name);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

std::pair<Tensor, Tensor> max_dim(const char* name, const Tensor& x, int dim, bool keepdim) {
  check_defined(name, x, "input");
  KDP_CHECK_FOR(name, x.dim() != 0, ShapeError, "cannot reduce a scalar along dimension {}", dim);
  int d = 0;
  try {
    d = x.shape().normalize_dim(dim);
  } catch (const ShapeError& e) {
    KDP_FAIL_FOR(name, ShapeError, "{}", e.what());
  }
  const DimSplit split = split_at(x.shape(), d);
  KDP_CHECK_FOR(name, split.size != 0, ShapeError, "dimension {} of {} is empty", d,
                x.shape().str());
  const Shape out_shape = reduced_shape(x.shape(), d, keepdim);
  Tensor values = Tensor::empty(out_shape, x.device());
  Tensor indices = Tensor::empty(out_shape, x.device());
  max_dim_kernel(x.device(), values.flat(), indices.flat(), x.cflat(), split);
  return {values, indices};
}

}  // namespace ops_detail

using namespace ops_detail;

Tensor sum(const Tensor& x) {
  return reduce_all("kdp::sum", x, false);
}
Tensor mean(const Tensor& x) {
  return reduce_all("kdp::mean", x, true);
}
Tensor sum(const Tensor& x, int dim, bool keepdim) {
  return reduce_dim("kdp::sum", x, dim, keepdim, false);
}
Tensor mean(const Tensor& x, int dim, bool keepdim) {
  return reduce_dim("kdp::mean", x, dim, keepdim, true);
}

std::tuple<Tensor, Tensor> max_with_indices(const Tensor& x_in, int dim, bool keepdim) {
  const Tensor& x = resolve(x_in);
  auto [values, indices] = max_dim("kdp::max", x, dim, keepdim);
  if (autograd::needs_grad({&x})) {
    auto node =
        std::make_shared<MaxDimNode>(x, split_at(x.shape(), x.shape().normalize_dim(dim)), indices);
    node->set_next_edges({&x});
    autograd::set_history(values, node);
  }
  return {values, indices};
}

Tensor max(const Tensor& x, int dim, bool keepdim) {
  return std::get<0>(max_with_indices(x, dim, keepdim));
}

Tensor argmax(const Tensor& x_in, int dim, bool keepdim) {
  return max_dim("kdp::argmax", resolve(x_in), dim, keepdim).second;
}

Tensor count_correct(const Tensor& logits, const Tensor& target) {
  check_defined("kdp::count_correct", logits, "logits");
  check_defined("kdp::count_correct", target, "target");
  KDP_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0), ShapeError,
            "logits {} and target {} must be [B, C] and [B]", logits.shape().str(),
            target.shape().str());
  check_same_device("kdp::count_correct", logits, "logits", target, "target");
  Tensor out = Tensor::empty(Shape{}, logits.device());
  ConstView2 x = logits.cmatrix();
  ConstView1 t = target.cflat();
  const auto classes = static_cast<int64_t>(x.extent(1));
  kdp::detail::sum_into(
      "kdp::count_correct", logits.device(), out.flat(), logits.size(0), 1.0,
      KOKKOS_LAMBDA(const int64_t b) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c) {
          if (x(b, c) > x(b, best)) best = c;
        }
        return static_cast<float>(best) == t(b) ? 1.0 : 0.0;
      });
  return out;
}

}  // namespace kdp
