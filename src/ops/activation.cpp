#include "kdp/ops/activation.hpp"

#include "core/check.hpp"
#include "kdp/core/execution_context.hpp"
#include "kdp/core/trace.hpp"
#include "kernels/native/dropout_row.hpp"
#include "kernels/native/host_kernels.hpp"
#include "kernels/native/vector_erf.hpp"
#include "unary.hpp"

namespace kdp {

namespace ops_detail {

namespace math = compat::math;

// NaN in, NaN out, as in PyTorch: the comparison is false for NaN.
struct ReluF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return x <= 0.0f ? 0.0f : x; }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const { return x > 0.0f ? g : 0.0f; }
};
struct LeakyReluF {
  float slope;
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return x <= 0.0f ? slope * x : x; }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const {
    return x > 0.0f ? g : slope * g;
  }
};
struct SigmoidF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return 1.0f / (1.0f + math::exp(-x)); }
  KOKKOS_INLINE_FUNCTION float grad(float, float y, float g) const { return g * y * (1.0f - y); }
};
struct TanhF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return math::tanh(x); }
  KOKKOS_INLINE_FUNCTION float grad(float, float y, float g) const { return g * (1.0f - y * y); }
};
// x Phi(x), Phi the standard normal distribution function; on host memory
// in kernels at the CPU's width (the same operations: the same bits).
struct GeluF {
  KOKKOS_INLINE_FUNCTION float operator()(float x) const { return x * kdp::detail::normal_cdf(x); }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const {
    const float pdf = 0.39894228040143268f * kdp::detail::vector_exp(-0.5f * x * x);
    return g * (kdp::detail::normal_cdf(x) + x * pdf);
  }
  static void host_forward(const float* x, float* y, int64_t n);
  static void host_backward(const float* x, const float* y, const float* g, float* gx, int64_t n);
};

KDP_ALWAYS_INLINE void gelu_forward_body(const float* __restrict x, float* __restrict y,
                                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluF{}(x[i]);
}
KDP_HOST_KERNEL(gelu_forward, gelu_forward_body, (const float* x, float* y, int64_t n), (x, y, n))
KDP_ALWAYS_INLINE void gelu_backward_body(const float* __restrict x, const float* __restrict g,
                                          float* __restrict gx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gx[i] = GeluF{}.grad(x[i], 0.0f, g[i]);
}
KDP_HOST_KERNEL(gelu_backward, gelu_backward_body,
                (const float* x, const float* g, float* gx, int64_t n), (x, g, gx, n))

void GeluF::host_forward(const float* x, float* y, int64_t n) {
  gelu_forward(x, y, n);
}
void GeluF::host_backward(const float* x, const float*, const float* g, float* gx, int64_t n) {
  gelu_backward(x, g, gx, n);
}

// PyTorch's tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3).
struct GeluTanhF {
  static constexpr float kRoot2OverPi = 0.79788456080286536f;
  static constexpr float kCube = 0.044715f;
  KOKKOS_INLINE_FUNCTION float operator()(float x) const {
    return 0.5f * x * (1.0f + math::tanh(kRoot2OverPi * (x + kCube * x * x * x)));
  }
  KOKKOS_INLINE_FUNCTION float grad(float x, float, float g) const {
    const float t = math::tanh(kRoot2OverPi * (x + kCube * x * x * x));
    const float du = kRoot2OverPi * (1.0f + 3.0f * kCube * x * x);
    return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
};

// Softmax family along the middle of [outer, size, inner]; one work item per
// (outer, inner) pair.
void softmax_kernel(const Device& device, View1 out, ConstView1 x, DimSplit s, bool log) {
  Kokkos::parallel_for(
      log ? "kdp::log_softmax" : "kdp::softmax", kdp::detail::range(device, s.outer * s.inner),
      KOKKOS_LAMBDA(const int64_t j) {
        const int64_t base = (j / s.inner) * s.size * s.inner + j % s.inner;
        float m = x(base);
        for (int64_t d = 1; d < s.size; ++d)
          m = x(base + d * s.inner) > m ? x(base + d * s.inner) : m;
        float total = 0.0f;
        for (int64_t d = 0; d < s.size; ++d) total += math::exp(x(base + d * s.inner) - m);
        if (log) {
          const float lse = m + math::log(total);
          for (int64_t d = 0; d < s.size; ++d)
            out(base + d * s.inner) = x(base + d * s.inner) - lse;
        } else {
          const float inv = 1.0f / total;
          for (int64_t d = 0; d < s.size; ++d) {
            out(base + d * s.inner) = math::exp(x(base + d * s.inner) - m) * inv;
          }
        }
      });
}

// softmax: gx = y * (g - sum(g * y)); log_softmax: gx = g - exp(y) * sum(g).
void softmax_backward_kernel(const Device& device, View1 gx, ConstView1 g, ConstView1 y, DimSplit s,
                             bool log) {
  Kokkos::parallel_for(
      log ? "kdp::log_softmax backward" : "kdp::softmax backward",
      kdp::detail::range(device, s.outer * s.inner), KOKKOS_LAMBDA(const int64_t j) {
        const int64_t base = (j / s.inner) * s.size * s.inner + j % s.inner;
        float dot = 0.0f;
        for (int64_t d = 0; d < s.size; ++d) {
          const int64_t k = base + d * s.inner;
          dot += log ? g(k) : g(k) * y(k);
        }
        for (int64_t d = 0; d < s.size; ++d) {
          const int64_t k = base + d * s.inner;
          gx(k) = log ? g(k) - math::exp(y(k)) * dot : y(k) * (g(k) - dot);
        }
      });
}

class SoftmaxNode : public autograd::Node {
 public:
  SoftmaxNode(const Tensor& y, DimSplit split, bool log)
      : Node(y.device()), y_(y), split_(split), log_(log) {}
  const char* name() const override { return log_ ? "kdp::log_softmax" : "kdp::softmax"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& y = y_.get(*this);
    Tensor gx = Tensor::empty(y.shape(), device());
    softmax_backward_kernel(device(), gx.flat(), grads[0].cflat(), y.cflat(), split_, log_);
    return {gx};
  }
  void release_saved() override { y_.reset(); }

 private:
  autograd::SavedTensor y_;
  DimSplit split_;
  bool log_;
};

Tensor softmax_impl(const char* name, const Tensor& x_in, int dim, bool log) {
  trace::Region region(name);
  const Tensor& x = resolve(x_in);
  check_defined(name, x, "input");
  int d = 0;
  try {
    d = x.shape().normalize_dim(dim);
  } catch (const ShapeError& e) {
    KDP_FAIL_FOR(name, ShapeError, "{}", e.what());
  }
  const DimSplit split = split_at(x.shape(), d);
  Tensor out = Tensor::empty(x.shape(), x.device());
  if (split.size > 0) softmax_kernel(x.device(), out.flat(), x.cflat(), split, log);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SoftmaxNode>(out, split, log);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

// Dropout keeps element i when uniform(seed, base + i) >= p. A dropped element
// is multiplied by 0, as in PyTorch, so a NaN stays NaN either way.
void dropout_kernel(const Device& device, View1 out, ConstView1 in, float p, uint64_t seed,
                    uint64_t base) {
  const float scale = 1.0f / (1.0f - p);
  const random::Stream stream(seed);
  const uint32_t threshold = random::uniform_threshold(p);
  const auto n = static_cast<int64_t>(out.extent(0));
  if (n == 0) return;
  if constexpr (compat::launches_are_synchronous()) {
    // Runs of elements over the host threads, two draws to a hash.
    const float* src = in.data();
    float* dst = out.data();
    kdp::detail::host_chunks("kdp::dropout", device, n, 8192, [=](int64_t i0, int64_t i1) {
      kdp::detail::dropout_row(src + i0, dst + i0, i1 - i0, base + static_cast<uint64_t>(i0),
                               stream, threshold, scale);
    });
    return;
  }
  // Element i draws for counter base + i; one hash serves a pair of counters.
  const uint64_t first = base >> 1,
                 pairs = ((base + static_cast<uint64_t>(n) - 1) >> 1) - first + 1;
  Kokkos::parallel_for(
      "kdp::dropout", kdp::detail::range(device, static_cast<int64_t>(pairs)),
      KOKKOS_LAMBDA(const int64_t k) {
        const uint64_t pair = first + static_cast<uint64_t>(k);
        uint32_t even = 0, odd = 0;
        stream.draw24_pair(pair, even, odd);
        const int64_t i = static_cast<int64_t>(2 * pair - base);  // even counter's element
        if (i >= 0) out(i) = in(i) * (even >= threshold ? scale : 0.0f);
        if (i + 1 < n) out(i + 1) = in(i + 1) * (odd >= threshold ? scale : 0.0f);
      });
}

// Element i belongs to channel i / plane: one draw per channel.
void dropout2d_kernel(const Device& device, View1 out, ConstView1 in, float p, uint64_t seed,
                      uint64_t base, int64_t plane) {
  const float scale = 1.0f / (1.0f - p);
  const random::Stream stream(seed);
  const uint32_t threshold = random::uniform_threshold(p);
  kdp::detail::for_each_2d(
      "kdp::dropout2d", device, static_cast<int64_t>(out.extent(0)) / plane, plane,
      KOKKOS_LAMBDA(const int64_t channel, const int64_t j) {
        const bool keep = stream.at_least(base + static_cast<uint64_t>(channel), threshold);
        out(channel * plane + j) = in(channel * plane + j) * (keep ? scale : 0.0f);
      });
}

// The backward of dropout (plane 0) and dropout2d: the forward's mask again.
class DropoutNode : public autograd::Node {
 public:
  DropoutNode(const Device& device, float p, uint64_t seed, uint64_t base, int64_t plane = 0)
      : Node(device), p_(p), seed_(seed), base_(base), plane_(plane) {}
  const char* name() const override { return plane_ > 0 ? "kdp::dropout2d" : "kdp::dropout"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor gx = Tensor::empty(g.shape(), device());
    if (plane_ > 0) {
      dropout2d_kernel(device(), gx.flat(), g.cflat(), p_, seed_, base_, plane_);
    } else {
      dropout_kernel(device(), gx.flat(), g.cflat(), p_, seed_, base_);
    }
    return {gx};
  }

 private:
  float p_;
  uint64_t seed_;
  uint64_t base_;
  int64_t plane_;
};

using RowSeeds = Kokkos::View<uint64_t*, MemSpace>;

// Per-sample dropout: element i of row r = i / row_len keeps when the draw of
// the row's stream for counter (i mod row_len) / plane (the element, or its
// channel for dropout2d) is at least p.
void keyed_dropout_kernel(const Device& device, View1 out, ConstView1 in, float p,
                          const RowSeeds& seeds, int64_t row_len, int64_t plane) {
  const float scale = 1.0f / (1.0f - p);
  const uint32_t threshold = random::uniform_threshold(p);
  if constexpr (compat::launches_are_synchronous()) {
    if (plane == 1) {
      // Host: a row's elements two draws to a hash, as dropout_kernel draws
      // them (the same numbers as at_least's), rows over the threads.
      const float* src = in.data();
      float* dst = out.data();
      kdp::detail::host_chunks(
          "kdp::dropout per sample", device, static_cast<int64_t>(seeds.extent(0)),
          std::max<int64_t>(1, 4096 / std::max<int64_t>(1, row_len)), [=](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              kdp::detail::dropout_row(src + r * row_len, dst + r * row_len, row_len, 0,
                                       random::Stream(seeds(r)), threshold, scale);
            }
          });
      return;
    }
  }
  kdp::detail::for_each_2d(
      "kdp::dropout per sample", device, static_cast<int64_t>(seeds.extent(0)), row_len,
      KOKKOS_LAMBDA(const int64_t r, const int64_t j) {
        const bool keep =
            random::Stream(seeds(r)).at_least(static_cast<uint64_t>(j / plane), threshold);
        out(r * row_len + j) = in(r * row_len + j) * (keep ? scale : 0.0f);
      });
}

class KeyedDropoutNode : public autograd::Node {
 public:
  KeyedDropoutNode(const Device& device, float p, RowSeeds seeds, int64_t row_len, int64_t plane)
      : Node(device), p_(p), seeds_(std::move(seeds)), row_len_(row_len), plane_(plane) {}
  const char* name() const override { return "kdp::dropout per sample"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor gx = Tensor::empty(grads[0].shape(), device());
    keyed_dropout_kernel(device(), gx.flat(), grads[0].cflat(), p_, seeds_, row_len_, plane_);
    return {gx};
  }

 private:
  float p_;
  RowSeeds seeds_;
  int64_t row_len_, plane_;
};

// dropout() and dropout2d() under a SampleDraws (`plane` 1 for dropout).
Tensor keyed_dropout(const char* op, const Tensor& x, float p, int64_t plane, SampleDraws& draws) {
  KDP_CHECK_FOR(op, x.dim() >= 1 && static_cast<size_t>(x.size(0)) == draws.rows(), ShapeError,
                "per-sample dropout draws for {} rows, and the input is {}", draws.rows(),
                x.describe());
  const std::vector<uint64_t> seeds = draws.next_call();
  RowSeeds device_seeds(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdp::dropout row seeds"),
                        seeds.size());
  Kokkos::deep_copy(
      device_seeds,
      Kokkos::View<const uint64_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
          seeds.data(), seeds.size()));
  const int64_t row_len = x.size(0) == 0 ? 0 : x.numel() / x.size(0);
  Tensor out = Tensor::empty(x.shape(), x.device());
  keyed_dropout_kernel(x.device(), out.flat(), x.cflat(), p, device_seeds, row_len, plane);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<KeyedDropoutNode>(x.device(), p, device_seeds, row_len, plane);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace ops_detail

using namespace ops_detail;

SampleDraws::SampleDraws(uint64_t seed, std::vector<uint64_t> keys)
    : seed_(seed), keys_(std::move(keys)), outer_(ExecutionContext::current().sample_draws) {
  ExecutionContext::current().sample_draws = this;
}

SampleDraws::~SampleDraws() {
  ExecutionContext::current().sample_draws = outer_;
}

SampleDraws* SampleDraws::active() {
  return ExecutionContext::current().sample_draws;
}

std::vector<uint64_t> SampleDraws::next_call() {
  std::vector<uint64_t> out(keys_.size());
  const uint64_t call = random::mix64(seed_ ^ random::mix64(calls_++ + 0x5bd1e995ull));
  for (size_t r = 0; r < keys_.size(); ++r) out[r] = call ^ random::mix64(keys_[r]);
  return out;
}

Tensor relu(const Tensor& x) {
  return unary("kdp::relu", x, ReluF{});
}
Tensor leaky_relu(const Tensor& x, float negative_slope) {
  return unary("kdp::leaky_relu", x, LeakyReluF{negative_slope});
}
Tensor sigmoid(const Tensor& x) {
  return unary("kdp::sigmoid", x, SigmoidF{});
}
Tensor tanh(const Tensor& x) {
  return unary("kdp::tanh", x, TanhF{});
}
Tensor gelu(const Tensor& x, const std::string& approximate) {
  if (approximate == "tanh") return unary("kdp::gelu", x, GeluTanhF{});
  KDP_CHECK(approximate == "none", ValueError, "approximate='{}' is not one of 'none', 'tanh'",
            approximate);
  return unary("kdp::gelu", x, GeluF{});
}
Tensor softmax(const Tensor& x, int dim) {
  return softmax_impl("kdp::softmax", x, dim, false);
}
Tensor log_softmax(const Tensor& x, int dim) {
  return softmax_impl("kdp::log_softmax", x, dim, true);
}

Tensor dropout(const Tensor& x_in, float p, bool training) {
  trace::Region region("kdp::dropout");
  const Tensor& x = resolve(x_in);
  check_defined("kdp::dropout", x, "input");
  KDP_CHECK(p >= 0.0f && p <= 1.0f, ValueError, "probability {} is not in [0, 1]", p);
  if (!training || p == 0.0f) return x;
  if (SampleDraws* draws = SampleDraws::active())
    return keyed_dropout("kdp::dropout", x, p, 1, *draws);
  Generator& gen = x.device().generator();
  const uint64_t seed = gen.seed();
  const uint64_t base = gen.reserve(static_cast<uint64_t>(x.numel()));
  Tensor out = Tensor::empty(x.shape(), x.device());
  dropout_kernel(x.device(), out.flat(), x.cflat(), p, seed, base);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<DropoutNode>(x.device(), p, seed, base);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor dropout2d(const Tensor& x_in, float p, bool training) {
  trace::Region region("kdp::dropout2d");
  const Tensor& x = resolve(x_in);
  check_defined("kdp::dropout2d", x, "input");
  KDP_CHECK(p >= 0.0f && p <= 1.0f, ValueError, "probability {} is not in [0, 1]", p);
  KDP_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError,
            "input {} is not [batch, channels, height, width] or [channels, height, "
            "width]",
            x.shape().str());
  if (!training || p == 0.0f) return x;
  const int64_t plane = x.size(-1) * x.size(-2);
  if (SampleDraws* draws = SampleDraws::active()) {
    KDP_CHECK(x.dim() == 4, ShapeError, "per-sample dropout draws need rows of samples: input {}",
              x.describe());
    return keyed_dropout("kdp::dropout2d", x, p, plane, *draws);
  }
  Tensor out = Tensor::empty(x.shape(), x.device());
  if (plane == 0 || x.numel() == 0) return out;
  Generator& gen = x.device().generator();
  const uint64_t seed = gen.seed();
  const uint64_t base = gen.reserve(static_cast<uint64_t>(x.numel() / plane));
  dropout2d_kernel(x.device(), out.flat(), x.cflat(), p, seed, base, plane);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<DropoutNode>(x.device(), p, seed, base, plane);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kdp
