#include "kdp/ops/elementwise.hpp"

#include "core/check.hpp"
#include "kdp/core/trace.hpp"
#include "unary.hpp"

namespace kdp {

namespace ops_detail {

namespace math = compat::math;

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return a;
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    const int da = a.rank() - rank + i;
    const int db = b.rank() - rank + i;
    const int64_t sa = da >= 0 ? a[da] : 1;
    const int64_t sb = db >= 0 ? b[db] : 1;
    KDP_CHECK_FOR(op, sa == sb || sa == 1 || sb == 1, ShapeError,
                  "shapes {} and {} cannot be broadcast together (dimension {}: {} vs {})", a.str(),
                  b.str(), i, sa, sb);
    dims[static_cast<size_t>(i)] = sa == 1 ? sb : sa;
  }
  return Shape(dims);
}

// Every broadcast runs in Shape::kMaxRank dimensions, shorter shapes padded
// in front with ones.
constexpr int kRank = Shape::kMaxRank;

// Index arithmetic of a broadcast: the output's dimensions padded to kRank
// and the strides of an input in them (0 where the input is broadcast); only
// the last `rank` (the output's) are walked.
struct BroadcastIndex {
  int64_t dims[kRank];
  int64_t strides[kRank];
  int first;  // kRank - the output's rank

  BroadcastIndex(const Shape& in, const Shape& out) {
    for (int d = 0; d < kRank; ++d) {
      dims[d] = 1;
      strides[d] = 0;
    }
    const int pad = kRank - out.rank();
    first = pad;
    for (int d = 0; d < out.rank(); ++d) dims[pad + d] = out[d];
    int64_t stride = 1;
    for (int d = in.rank() - 1; d >= 0; --d) {
      const int od = pad + out.rank() - in.rank() + d;
      strides[od] = in[d] == 1 ? 0 : stride;
      stride *= in[d];
    }
  }

  KOKKOS_INLINE_FUNCTION int64_t operator()(int64_t i) const {
    int64_t offset = 0;
    for (int d = kRank - 1; d >= first; --d) {
      const int64_t idx = i % dims[d];
      i /= dims[d];
      offset += idx * strides[d];
    }
    return offset;
  }
};

enum class BroadcastMode { Same, AScalar, BScalar, BRow, General };

// out = f(a, b) elementwise; `out` has the broadcast shape of a and b.
template <class F>
void binary_kernel(const std::string& label, const Device& device, const Tensor& out_t,
                   const Tensor& a, const Tensor& b, F f) {
  const Shape& os = out_t.shape();
  View1 out = out_t.flat();
  ConstView1 av = a.cflat();
  ConstView1 bv = b.cflat();
  const auto n = static_cast<int64_t>(out.extent(0));
  auto policy = kdp::detail::range(device, n);
  BroadcastMode mode = BroadcastMode::General;
  const int64_t cols = b.numel();
  if (a.shape() == b.shape()) {
    mode = BroadcastMode::Same;
  } else if (b.numel() == 1) {
    mode = BroadcastMode::BScalar;
  } else if (a.numel() == 1) {
    mode = BroadcastMode::AScalar;
  } else if (a.shape() == os && a.shape().rank() > b.shape().rank()) {
    // b covers the trailing dimensions of a exactly (a bias row).
    bool trailing = true;
    for (int d = 0; d < b.shape().rank(); ++d) {
      trailing = trailing && b.shape()[d] == a.shape()[a.shape().rank() - b.shape().rank() + d];
    }
    if (trailing) mode = BroadcastMode::BRow;
  }
  switch (mode) {
    case BroadcastMode::Same:
      Kokkos::parallel_for(
          label, policy, KOKKOS_LAMBDA(const int64_t i) { out(i) = f(av(i), bv(i)); });
      break;
    case BroadcastMode::BScalar:
      Kokkos::parallel_for(
          label, policy, KOKKOS_LAMBDA(const int64_t i) { out(i) = f(av(i), bv(0)); });
      break;
    case BroadcastMode::AScalar:
      Kokkos::parallel_for(
          label, policy, KOKKOS_LAMBDA(const int64_t i) { out(i) = f(av(0), bv(i)); });
      break;
    case BroadcastMode::BRow:
      kdp::detail::for_each_2d(
          label, device, n / cols, cols, KOKKOS_LAMBDA(const int64_t r, const int64_t c) {
            out(r * cols + c) = f(av(r * cols + c), bv(c));
          });
      break;
    case BroadcastMode::General: {
      const BroadcastIndex ia(a.shape(), os);
      const BroadcastIndex ib(b.shape(), os);
      Kokkos::parallel_for(
          label, policy, KOKKOS_LAMBDA(const int64_t i) { out(i) = f(av(ia(i)), bv(ib(i))); });
      break;
    }
  }
}

void sum_to_kernel(const Device& device, View1 out, ConstView1 g, const Shape& target,
                   const Shape& full) {
  // For each element of `target`, sum the elements of `g` that broadcast onto it.
  const int pad_t = kRank - target.rank();
  const int pad_f = kRank - full.rank();
  int64_t fdims[kRank], tdims[kRank], fstride[kRank], rdims[kRank];
  for (int d = 0; d < kRank; ++d) fdims[d] = tdims[d] = rdims[d] = 1;
  for (int d = 0; d < full.rank(); ++d) fdims[pad_f + d] = full[d];
  for (int d = 0; d < target.rank(); ++d) tdims[pad_t + d] = target[d];
  int64_t s = 1;
  for (int d = kRank - 1; d >= 0; --d) {
    fstride[d] = s;
    s *= fdims[d];
  }
  int64_t reduce_count = 1;
  for (int d = 0; d < kRank; ++d) {
    if (tdims[d] == 1 && fdims[d] != 1) {
      rdims[d] = fdims[d];
      reduce_count *= fdims[d];
    }
  }
  Kokkos::parallel_for(
      "kdp::sum_to", kdp::detail::range(device, static_cast<int64_t>(out.extent(0))),
      KOKKOS_LAMBDA(const int64_t j) {
        // Position of j in the target, which is also its position in `full` on the kept dims.
        int64_t base = 0;
        int64_t rest = j;
        for (int d = kRank - 1; d >= 0; --d) {
          const int64_t idx = rest % tdims[d];
          rest /= tdims[d];
          if (rdims[d] == 1) base += idx * fstride[d];
        }
        float acc = 0.0f;
        for (int64_t k = 0; k < reduce_count; ++k) {
          int64_t off = base;
          int64_t r = k;
          for (int d = kRank - 1; d >= 0; --d) {
            if (rdims[d] != 1) {
              off += (r % rdims[d]) * fstride[d];
              r /= rdims[d];
            }
          }
          acc += g(off);
        }
        out(j) = acc;
      });
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor out = Tensor::empty(shape, g.device());
  sum_to_kernel(g.device(), out.flat(), g.cflat(), shape, g.shape());
  return out;
}

struct AddF {
  KOKKOS_INLINE_FUNCTION float operator()(float a, float b) const { return a + b; }
};
struct SubF {
  KOKKOS_INLINE_FUNCTION float operator()(float a, float b) const { return a - b; }
};
struct MulF {
  KOKKOS_INLINE_FUNCTION float operator()(float a, float b) const { return a * b; }
};
struct DivF {
  KOKKOS_INLINE_FUNCTION float operator()(float a, float b) const { return a / b; }
};
// d(a/b)/db * g = -g * a / b^2, evaluated as f(g * a, b).
struct DivGradBF {
  KOKKOS_INLINE_FUNCTION float operator()(float ga, float b) const { return -ga / (b * b); }
};

enum class BinaryKind { Add, Sub, Mul, Div };

// A switch, as every enum's names in kdp: -Wswitch then names an enumerator
// added without its name, which a shared table could not.
const char* binary_name(BinaryKind kind) {
  switch (kind) {
    case BinaryKind::Add:
      return "kdp::add";
    case BinaryKind::Sub:
      return "kdp::sub";
    case BinaryKind::Mul:
      return "kdp::mul";
    case BinaryKind::Div:
      return "kdp::div";
  }
  return "kdp::binary";
}

Tensor binary_raw(BinaryKind kind, const Tensor& a, const Tensor& b, const Shape& out_shape) {
  Tensor out = Tensor::empty(out_shape, a.device());
  const std::string label = binary_name(kind);
  switch (kind) {
    case BinaryKind::Add:
      binary_kernel(label, a.device(), out, a, b, AddF{});
      break;
    case BinaryKind::Sub:
      binary_kernel(label, a.device(), out, a, b, SubF{});
      break;
    case BinaryKind::Mul:
      binary_kernel(label, a.device(), out, a, b, MulF{});
      break;
    case BinaryKind::Div:
      binary_kernel(label, a.device(), out, a, b, DivF{});
      break;
  }
  return out;
}

class BinaryNode : public autograd::Node {
 public:
  BinaryNode(BinaryKind kind, const Tensor& a, const Tensor& b, bool save_a, bool save_b)
      : Node(a.device()), kind_(kind), a_shape_(a.shape()), b_shape_(b.shape()) {
    if (save_a) a_ = autograd::SavedTensor(a);
    if (save_b) b_ = autograd::SavedTensor(b);
  }
  const char* name() const override { return binary_name(kind_); }

  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const bool want_a = next_edges()[0].valid();
    const bool want_b = next_edges()[1].valid();
    Tensor ga, gb;
    switch (kind_) {
      case BinaryKind::Add:
        if (want_a) ga = sum_to(g, a_shape_);
        if (want_b) gb = sum_to(g, b_shape_);
        break;
      case BinaryKind::Sub:
        if (want_a) ga = sum_to(g, a_shape_);
        if (want_b) gb = sum_to(neg(g), b_shape_);
        break;
      case BinaryKind::Mul:
        if (want_a) ga = sum_to(binary_raw(BinaryKind::Mul, g, b_.get(*this), g.shape()), a_shape_);
        if (want_b) gb = sum_to(binary_raw(BinaryKind::Mul, g, a_.get(*this), g.shape()), b_shape_);
        break;
      case BinaryKind::Div: {
        const Tensor& b = b_.get(*this);
        if (want_a) ga = sum_to(binary_raw(BinaryKind::Div, g, b, g.shape()), a_shape_);
        if (want_b) {
          Tensor ga_times_a = binary_raw(BinaryKind::Mul, g, a_.get(*this), g.shape());
          Tensor t = Tensor::empty(g.shape(), device());
          binary_kernel("kdp::div backward", device(), t, ga_times_a, b, DivGradBF{});
          gb = sum_to(t, b_shape_);
        }
        break;
      }
    }
    return {ga, gb};
  }
  void release_saved() override {
    a_.reset();
    b_.reset();
  }

 private:
  BinaryKind kind_;
  Shape a_shape_, b_shape_;
  autograd::SavedTensor a_, b_;
};

Tensor binary(BinaryKind kind, const Tensor& a_in, const Tensor& b_in) {
  trace::Region region(binary_name(kind));
  const char* op = binary_name(kind);
  const Tensor& a = resolve(a_in);
  const Tensor& b = resolve(b_in);
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  check_same_device(op, a, "a", b, "b");
  const Shape out_shape = broadcast_shapes(op, a.shape(), b.shape());
  Tensor out = binary_raw(kind, a, b, out_shape);
  if (autograd::needs_grad({&a, &b})) {
    const bool save_a = (kind == BinaryKind::Mul && b.requires_grad()) || kind == BinaryKind::Div;
    const bool save_b = (kind == BinaryKind::Mul && a.requires_grad()) || kind == BinaryKind::Div;
    auto node = std::make_shared<BinaryNode>(kind, a, b, save_a, save_b);
    node->set_next_edges({&a, &b});
    autograd::set_history(out, node);
  }
  return out;
}

// ---- one-tensor ops ---------------------------------------------------------------

struct AddScalarF {
  float s;
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return x + s; }
  KOKKOS_INLINE_FUNCTION float grad(float, float, float g) const { return g; }
};
struct MulScalarF {
  float s;
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return x * s; }
  KOKKOS_INLINE_FUNCTION float grad(float, float, float g) const { return g * s; }
};
struct RSubScalarF {
  float s;
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return s - x; }
  KOKKOS_INLINE_FUNCTION float grad(float, float, float g) const { return -g; }
};
struct RDivScalarF {
  float s;
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return s / x; }
  KOKKOS_INLINE_FUNCTION float grad(float x, float y, float g) const { return -g * y / x; }
};
struct NegF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return -x; }
  KOKKOS_INLINE_FUNCTION float grad(float, float, float g) const { return -g; }
};
struct SquareF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return x * x; }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const { return 2.0f * x * g; }
};
struct PowF {
  float e;
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return math::pow(x, e); }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const {
    return e == 0.0f ? 0.0f : g * e * math::pow(x, e - 1.0f);
  }
};
struct ExpF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return math::exp(x); }
  KOKKOS_INLINE_FUNCTION float grad(float, float y, float g) const { return g * y; }
};
struct LogF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return math::log(x); }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const { return g / x; }
};
struct SqrtF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return math::sqrt(x); }
  KOKKOS_INLINE_FUNCTION float grad(float, float y, float g) const { return g / (2.0f * y); }
};
struct AbsF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return x < 0.0f ? -x : x; }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const {
    return x > 0.0f ? g : (x < 0.0f ? -g : 0.0f);
  }
};
struct ClampF {
  float lo, hi;
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return x < lo ? lo : (x > hi ? hi : x); }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const {
    return (x >= lo && x <= hi) ? g : 0.0f;
  }
};

}  // namespace ops_detail

using namespace ops_detail;

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(BinaryKind::Add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(BinaryKind::Sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(BinaryKind::Mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(BinaryKind::Div, a, b);
}

Tensor add(const Tensor& a, float b) {
  return unary("kdp::add", a, AddScalarF{b});
}
Tensor sub(const Tensor& a, float b) {
  return unary("kdp::sub", a, AddScalarF{-b});
}
Tensor rsub(const Tensor& a, float b) {
  return unary("kdp::rsub", a, RSubScalarF{b});
}
Tensor mul(const Tensor& a, float b) {
  return unary("kdp::mul", a, MulScalarF{b});
}
Tensor div(const Tensor& a, float b) {
  return unary("kdp::div", a, MulScalarF{1.0f / b});
}
Tensor rdiv(const Tensor& a, float b) {
  return unary("kdp::rdiv", a, RDivScalarF{b});
}

Tensor neg(const Tensor& x) {
  return unary("kdp::neg", x, NegF{});
}
Tensor square(const Tensor& x) {
  return unary("kdp::square", x, SquareF{});
}
Tensor pow(const Tensor& x, float exponent) {
  return unary("kdp::pow", x, PowF{exponent});
}
Tensor exp(const Tensor& x) {
  return unary("kdp::exp", x, ExpF{});
}
Tensor log(const Tensor& x) {
  return unary("kdp::log", x, LogF{});
}
Tensor sqrt(const Tensor& x) {
  return unary("kdp::sqrt", x, SqrtF{});
}
Tensor abs(const Tensor& x) {
  return unary("kdp::abs", x, AbsF{});
}

Tensor clamp(const Tensor& x, float low, float high) {
  KDP_CHECK(low <= high, ValueError, "low {} is greater than high {}", low, high);
  return unary("kdp::clamp", x, ClampF{low, high});
}

}  // namespace kdp
