#include "kdp/ops/pooling.hpp"

#include <algorithm>
#include <limits>

#include "core/check.hpp"
#include "kdp/core/trace.hpp"
#include "kernels/native/host_kernels.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

namespace {

using IndexView = Kokkos::View<int32_t*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The sizes of one pooling: planes (batch x channels) of h x w in, oh x ow out.
struct PoolGeometry {
  int64_t planes, h, w;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t oh, ow;
};

// The first and one-past-last window rows that cover input row `i` along one
// dimension (stride s, padding p, kernel k, dilation d, out outputs).
KOKKOS_INLINE_FUNCTION void covering(int64_t i, int64_t s, int64_t p, int64_t k, int64_t d,
                                     int64_t out, int64_t& first, int64_t& last) {
  const int64_t reach = i + p - d * (k - 1);  // the window start that reaches i last
  first = reach <= 0 ? 0 : (reach + s - 1) / s;
  last = (i + p) / s + 1;
  if (last > out) last = out;
}

// The maximum of window (y, x) of a plane and its position, by PyTorch's rule:
// the first position, a larger value, or a NaN.
// (`lowest` is -infinity: what a window of padding alone would give.)
KOKKOS_INLINE_FUNCTION void window_max(const float* __restrict plane, const PoolGeometry& g,
                                       int64_t y, int64_t x, float lowest, float& best,
                                       int32_t& at) {
  best = lowest;
  at = -1;
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t iy = y * g.sh - g.ph + i * g.dh;
    if (iy < 0 || iy >= g.h) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t ix = x * g.sw - g.pw + j * g.dw;
      if (ix < 0 || ix >= g.w) continue;
      const float v = plane[iy * g.w + ix];
      // Selects, not branches: which element wins is data, and unpredictable.
      const bool take = at < 0 || v > best || v != v;
      best = take ? v : best;
      at = take ? static_cast<int32_t>(iy * g.w + ix) : at;
    }
  }
}

// Whether the windows neither overlap nor leave a gap the backward must fill
// from several windows: each input element belongs to at most one window.
bool disjoint_windows(const PoolGeometry& g) {
  return g.sh >= g.dh * (g.kh - 1) + 1 && g.sw >= g.dw * (g.kw - 1) + 1 && g.dh == 1 && g.dw == 1;
}

// The 2x2, stride-2 windows of CNNs, without padding: every window inside,
// four candidates compared by selects in scan order, by the rule of window_max.
KDP_ALWAYS_INLINE void pool_pairs_body(const float* __restrict plane, const PoolGeometry& g,
                                       float* __restrict out, int32_t* __restrict at) {
  for (int64_t y = 0; y < g.oh; ++y) {
    const float* r0 = plane + 2 * y * g.w;
    const float* r1 = r0 + g.w;
    for (int64_t x = 0; x < g.ow; ++x) {
      const int32_t base = static_cast<int32_t>(2 * y * g.w + 2 * x);
      float best = r0[2 * x];
      int32_t pos = base;
      const float cand[3] = {r0[2 * x + 1], r1[2 * x], r1[2 * x + 1]};
      const int32_t where[3] = {base + 1, base + static_cast<int32_t>(g.w),
                                base + static_cast<int32_t>(g.w) + 1};
      for (int k = 0; k < 3; ++k) {
        const bool take = cand[k] > best || cand[k] != cand[k];
        best = take ? cand[k] : best;
        pos = take ? where[k] : pos;
      }
      out[y * g.ow + x] = best;
      at[y * g.ow + x] = pos;
    }
  }
}
KDP_HOST_KERNEL(pool_pairs, pool_pairs_body,
                (const float* __restrict plane, const PoolGeometry& g, float* __restrict out,
                 int32_t* __restrict at),
                (plane, g, out, at))

#if defined(KDP_X86_KERNELS)
// pool_pairs with AVX-512: sixteen windows at a time, their four candidates
// taken apart from two rows of 32 floats, compared and selected by the same
// rule (a larger value or a NaN replaces the best so far).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void pool_pairs_avx512_lanes(
    const float* __restrict plane, const PoolGeometry& g, float* __restrict out,
    int32_t* __restrict at) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lane2 =
      _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
  const auto w = static_cast<int32_t>(g.w);
  for (int64_t y = 0; y < g.oh; ++y) {
    const float* r0 = plane + 2 * y * g.w;
    const float* r1 = r0 + g.w;
    for (int64_t x0 = 0; x0 < g.ow; x0 += 16) {
      const int64_t left = std::min<int64_t>(16, g.ow - x0);
      const __mmask16 outs = static_cast<__mmask16>((1u << left) - 1u);
      const __mmask16 lo = static_cast<__mmask16>(left >= 8 ? 0xffffu : (1u << (2 * left)) - 1u);
      const __mmask16 hi = static_cast<__mmask16>(left <= 8 ? 0u : (1u << (2 * (left - 8))) - 1u);
      const float* p0 = r0 + 2 * x0;
      const float* p1 = r1 + 2 * x0;
      const __m512 u0 = _mm512_maskz_loadu_ps(lo, p0), u1 = _mm512_maskz_loadu_ps(hi, p0 + 16);
      const __m512 v0 = _mm512_maskz_loadu_ps(lo, p1), v1 = _mm512_maskz_loadu_ps(hi, p1 + 16);
      const __m512 cand[3] = {_mm512_permutex2var_ps(u0, odd, u1),
                              _mm512_permutex2var_ps(v0, even, v1),
                              _mm512_permutex2var_ps(v0, odd, v1)};
      const __m512i base =
          _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * y * g.w + 2 * x0)), lane2);
      const __m512i where[3] = {_mm512_add_epi32(base, _mm512_set1_epi32(1)),
                                _mm512_add_epi32(base, _mm512_set1_epi32(w)),
                                _mm512_add_epi32(base, _mm512_set1_epi32(w + 1))};
      __m512 best = _mm512_permutex2var_ps(u0, even, u1);
      __m512i pos = base;
      for (int k = 0; k < 3; ++k) {
        const __mmask16 take = _mm512_cmp_ps_mask(cand[k], best, _CMP_GT_OQ) |
                               _mm512_cmp_ps_mask(cand[k], cand[k], _CMP_UNORD_Q);
        best = _mm512_mask_mov_ps(best, take, cand[k]);
        pos = _mm512_mask_mov_epi32(pos, take, where[k]);
      }
      _mm512_mask_storeu_ps(out + y * g.ow + x0, outs, best);
      _mm512_mask_storeu_epi32(at + y * g.ow + x0, outs, pos);
    }
  }
}
#endif

// pool_pairs at the widest width the CPU allows.
void pool_pairs_dispatched(const float* plane, const PoolGeometry& g, float* out, int32_t* at) {
#if defined(KDP_X86_KERNELS)
  if (kdp::detail::cpu_isa() >= kdp::detail::CpuIsa::Avx512) {
    return pool_pairs_avx512_lanes(plane, g, out, at);
  }
#endif
  pool_pairs(plane, g, out, at);
}

// Whether max pooling has the 2x2, stride-2 windows of pool_pairs.
bool pairs_of(const PoolGeometry& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && g.dh == 1 &&
         g.dw == 1 && 2 * g.oh <= g.h && 2 * g.ow <= g.w;
}

void max_forward(const Device& device, View1 out, IndexView index, ConstView1 in,
                 const PoolGeometry& g) {
  const float lowest = -std::numeric_limits<float>::infinity();
  if constexpr (compat::launches_are_synchronous()) {
    // Host backends: a plane per work item.
    const bool pairs = pairs_of(g);
    kdp::detail::host_chunks("kdp::max_pool2d", device, g.planes, 1, [=](int64_t p, int64_t) {
      const float* plane = &in(p * g.h * g.w);
      float* o = &out(p * g.oh * g.ow);
      int32_t* at = &index(p * g.oh * g.ow);
      if (pairs) return pool_pairs_dispatched(plane, g, o, at);
      for (int64_t y = 0; y < g.oh; ++y) {
        for (int64_t x = 0; x < g.ow; ++x, ++o, ++at) window_max(plane, g, y, x, lowest, *o, *at);
      }
    });
  } else {
    kdp::detail::for_each_2d(
        "kdp::max_pool2d", device, g.planes * g.oh, g.ow,
        KOKKOS_LAMBDA(const int64_t row, const int64_t x) {
          const int64_t p = row / g.oh, y = row % g.oh;
          window_max(&in(p * g.h * g.w), g, y, x, lowest, out(row * g.ow + x),
                     index(row * g.ow + x));
        });
  }
}

// Each input element gathers the gradients of the windows whose maximum it
// was; with disjoint windows (pooling's usual case) each window's gradient
// goes straight to its maximum instead.
void max_backward(const Device& device, View1 gx, IndexView index, ConstView1 gy,
                  const PoolGeometry& g) {
  if constexpr (compat::launches_are_synchronous()) {
    if (disjoint_windows(g)) {
      // Zeros, then each window's gradient to its maximum (a write per
      // window: cheaper than a select per input element).
      kdp::detail::host_chunks("kdp::max_pool2d backward", device, g.planes, 1,
                               [=](int64_t p, int64_t) {
                                 float* plane = &gx(p * g.h * g.w);
                                 const int64_t base = p * g.oh * g.ow;
                                 std::fill(plane, plane + g.h * g.w, 0.0f);
                                 for (int64_t k = 0; k < g.oh * g.ow; ++k) {
                                   if (index(base + k) >= 0) plane[index(base + k)] += gy(base + k);
                                 }
                               });
      return;
    }
  }
  kdp::detail::for_each_2d(
      "kdp::max_pool2d backward", device, g.planes * g.h, g.w,
      KOKKOS_LAMBDA(const int64_t row, const int64_t ix) {
        const int64_t plane = row / g.h, iy = row % g.h;
        const auto here = static_cast<int32_t>(iy * g.w + ix);
        float acc = 0.0f;
        int64_t y0, y1, x0, x1;
        covering(iy, g.sh, g.ph, g.kh, g.dh, g.oh, y0, y1);
        covering(ix, g.sw, g.pw, g.kw, g.dw, g.ow, x0, x1);
        for (int64_t y = y0; y < y1; ++y) {
          for (int64_t x = x0; x < x1; ++x) {
            const int64_t o = (plane * g.oh + y) * g.ow + x;
            if (index(o) == here) acc += gy(o);
          }
        }
        gx(row * g.w + ix) = acc;
      });
}

// The window of output (y, x) of an average pooling, clipped to the input, and
// its divisor.
struct AvgWindow {
  int64_t y0, y1, x0, x1;
  float divisor;
};
KOKKOS_INLINE_FUNCTION AvgWindow avg_window(const PoolGeometry& g, int64_t y, int64_t x,
                                            bool count_include_pad) {
  int64_t y0 = y * g.sh - g.ph, x0 = x * g.sw - g.pw;
  int64_t y1 = y0 + g.kh < g.h + g.ph ? y0 + g.kh : g.h + g.ph;
  int64_t x1 = x0 + g.kw < g.w + g.pw ? x0 + g.kw : g.w + g.pw;
  const int64_t padded = (y1 - y0) * (x1 - x0);
  y0 = y0 < 0 ? 0 : y0;
  x0 = x0 < 0 ? 0 : x0;
  y1 = y1 > g.h ? g.h : y1;
  x1 = x1 > g.w ? g.w : x1;
  const int64_t inside = (y1 - y0) * (x1 - x0);
  return {y0, y1, x0, x1, static_cast<float>(count_include_pad ? padded : inside)};
}

void avg_forward(const Device& device, View1 out, ConstView1 in, const PoolGeometry& g,
                 bool count_include_pad) {
  kdp::detail::for_each_2d(
      "kdp::avg_pool2d", device, g.planes * g.oh, g.ow,
      KOKKOS_LAMBDA(const int64_t row, const int64_t x) {
        const int64_t plane = row / g.oh, y = row % g.oh;
        const AvgWindow a = avg_window(g, y, x, count_include_pad);
        float s = 0.0f;
        for (int64_t iy = a.y0; iy < a.y1; ++iy)
          for (int64_t ix = a.x0; ix < a.x1; ++ix) s += in((plane * g.h + iy) * g.w + ix);
        out(row * g.ow + x) = a.divisor > 0.0f ? s / a.divisor : 0.0f;
      });
}

void avg_backward(const Device& device, View1 gx, ConstView1 gy, const PoolGeometry& g,
                  bool count_include_pad) {
  kdp::detail::for_each_2d(
      "kdp::avg_pool2d backward", device, g.planes * g.h, g.w,
      KOKKOS_LAMBDA(const int64_t row, const int64_t ix) {
        const int64_t plane = row / g.h, iy = row % g.h;
        int64_t y0, y1, x0, x1;
        covering(iy, g.sh, g.ph, g.kh, 1, g.oh, y0, y1);
        covering(ix, g.sw, g.pw, g.kw, 1, g.ow, x0, x1);
        float acc = 0.0f;
        for (int64_t y = y0; y < y1; ++y) {
          for (int64_t x = x0; x < x1; ++x) {
            const AvgWindow a = avg_window(g, y, x, count_include_pad);
            if (iy >= a.y0 && iy < a.y1 && ix >= a.x0 && ix < a.x1 && a.divisor > 0.0f) {
              acc += gy((plane * g.oh + y) * g.ow + x) / a.divisor;
            }
          }
        }
        gx(row * g.w + ix) = acc;
      });
}

// Region i of n over a length of `in`: [floor(i in / n), ceil((i + 1) in / n)).
KOKKOS_INLINE_FUNCTION int64_t region_start(int64_t i, int64_t n, int64_t in) {
  return (i * in) / n;
}
KOKKOS_INLINE_FUNCTION int64_t region_end(int64_t i, int64_t n, int64_t in) {
  return ((i + 1) * in + n - 1) / n;
}

void adaptive_forward(const Device& device, View1 out, ConstView1 in, const PoolGeometry& g) {
  kdp::detail::for_each_2d(
      "kdp::adaptive_avg_pool2d", device, g.planes * g.oh, g.ow,
      KOKKOS_LAMBDA(const int64_t row, const int64_t x) {
        const int64_t plane = row / g.oh, y = row % g.oh;
        const int64_t y0 = region_start(y, g.oh, g.h), y1 = region_end(y, g.oh, g.h);
        const int64_t x0 = region_start(x, g.ow, g.w), x1 = region_end(x, g.ow, g.w);
        float s = 0.0f;
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) s += in((plane * g.h + iy) * g.w + ix);
        out(row * g.ow + x) = s / static_cast<float>((y1 - y0) * (x1 - x0));
      });
}

void adaptive_backward(const Device& device, View1 gx, ConstView1 gy, const PoolGeometry& g) {
  kdp::detail::for_each_2d(
      "kdp::adaptive_avg_pool2d backward", device, g.planes * g.h, g.w,
      KOKKOS_LAMBDA(const int64_t row, const int64_t ix) {
        const int64_t plane = row / g.h, iy = row % g.h;
        float acc = 0.0f;
        for (int64_t y = 0; y < g.oh; ++y) {
          const int64_t y0 = region_start(y, g.oh, g.h), y1 = region_end(y, g.oh, g.h);
          if (iy < y0 || iy >= y1) continue;
          for (int64_t x = 0; x < g.ow; ++x) {
            const int64_t x0 = region_start(x, g.ow, g.w), x1 = region_end(x, g.ow, g.w);
            if (ix < x0 || ix >= x1) continue;
            acc += gy((plane * g.oh + y) * g.ow + x) / static_cast<float>((y1 - y0) * (x1 - x0));
          }
        }
        gx(row * g.w + ix) = acc;
      });
}

enum class PoolKind { Max, Avg, Adaptive };

class PoolNode : public autograd::Node {
 public:
  PoolNode(const char* name, const Device& device, PoolKind kind, const PoolGeometry& g,
           const Tensor& index, bool count_include_pad)
      : Node(device),
        name_(name),
        kind_(kind),
        g_(g),
        index_(index),
        count_include_pad_(count_include_pad) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor gx = Tensor::empty(Shape{g_.planes * g_.h * g_.w}, device());
    switch (kind_) {
      case PoolKind::Max:
        max_backward(device(), gx.flat(), indices(index_), grads[0].cflat(), g_);
        break;
      case PoolKind::Avg:
        avg_backward(device(), gx.flat(), grads[0].cflat(), g_, count_include_pad_);
        break;
      case PoolKind::Adaptive:
        adaptive_backward(device(), gx.flat(), grads[0].cflat(), g_);
        break;
    }
    return {gx.reshape(shape_of_input())};
  }
  void release_saved() override { index_ = Tensor(); }
  void set_input_shape(const Shape& s) { input_shape_ = s; }

  // The argmax positions live in a float tensor's storage (from the caching
  // allocator, like every tensor), read as 32-bit integers.
  static IndexView indices(const Tensor& t) {
    return IndexView(reinterpret_cast<int32_t*>(t.data()), static_cast<size_t>(t.numel()));
  }

 private:
  std::vector<int64_t> shape_of_input() const { return input_shape_.to_vector(); }
  const char* name_;
  PoolKind kind_;
  PoolGeometry g_;
  Tensor index_;  // only written by the forward, so no version check is needed
  bool count_include_pad_;
  Shape input_shape_;
};

PoolGeometry geometry(const char* op, const Tensor& x, Size2 kernel, std::optional<Size2> stride,
                      Size2 padding, Size2 dilation, bool ceil_mode) {
  KDP_CHECK_FOR(op, x.dim() == 4 || x.dim() == 3, ShapeError,
                "input {} is not [batch, channels, height, width] or "
                "[channels, height, width]",
                x.shape().str());
  const Size2 s = stride.value_or(kernel);
  KDP_CHECK_FOR(op,
                kernel.h >= 1 && kernel.w >= 1 && s.h >= 1 && s.w >= 1 && dilation.h >= 1 &&
                    dilation.w >= 1 && padding.h >= 0 && padding.w >= 0,
                ValueError, "kernel {}, stride {} and dilation {} must be >= 1 and padding {} >= 0",
                kernel.str(), s.str(), dilation.str(), padding.str());
  KDP_CHECK_FOR(op, padding.h * 2 <= kernel.h && padding.w * 2 <= kernel.w, ValueError,
                "padding {} must be at most half the kernel {}", padding.str(), kernel.str());
  const int r = x.dim();
  PoolGeometry g{};
  g.h = x.size(r - 2);
  g.w = x.size(r - 1);
  g.planes = x.numel() / std::max<int64_t>(1, g.h * g.w);
  g.kh = kernel.h;
  g.kw = kernel.w;
  g.sh = s.h;
  g.sw = s.w;
  g.ph = padding.h;
  g.pw = padding.w;
  g.dh = dilation.h;
  g.dw = dilation.w;
  g.oh = window_output_size(g.h, g.kh, g.sh, g.ph, g.dh, ceil_mode);
  g.ow = window_output_size(g.w, g.kw, g.sw, g.pw, g.dw, ceil_mode);
  KDP_CHECK_FOR(op, g.oh >= 1 && g.ow >= 1, ShapeError,
                "a {} window (padding {}, dilation {}) does not fit the "
                "{}x{} input {}",
                kernel.str(), padding.str(), dilation.str(), g.h, g.w, x.shape().str());
  KDP_CHECK_FOR(op, g.h * g.w <= std::numeric_limits<int32_t>::max(), ShapeError,
                "planes of {}x{} are too large to index", g.h, g.w);
  return g;
}

Shape output_shape(const Tensor& x, const PoolGeometry& g) {
  std::vector<int64_t> dims = x.shape().to_vector();
  dims[dims.size() - 2] = g.oh;
  dims[dims.size() - 1] = g.ow;
  return Shape(dims);
}

Tensor record(Tensor out, const Tensor& x, const char* name, PoolKind kind, const PoolGeometry& g,
              const Tensor& index, bool count_include_pad) {
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<PoolNode>(name, x.device(), kind, g, index, count_include_pad);
    node->set_input_shape(x.shape());
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

}  // namespace ops_detail

using namespace ops_detail;

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride,
                  Size2 padding, Size2 dilation, bool ceil_mode) {
  trace::Region region("kdp::max_pool2d");
  const char* op = "kdp::max_pool2d";
  const Tensor& x = resolve(input);
  check_defined(op, x, "input");
  const PoolGeometry g = geometry(op, x, kernel_size, stride, padding, dilation, ceil_mode);
  Tensor out = Tensor::empty(output_shape(x, g), x.device());
  Tensor index = Tensor::empty(out.shape(), x.device());
  if (out.numel() > 0) max_forward(x.device(), out.flat(), PoolNode::indices(index), x.cflat(), g);
  return record(out, x, op, PoolKind::Max, g, index, false);
}

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride,
                  Size2 padding, bool ceil_mode, bool count_include_pad) {
  trace::Region region("kdp::avg_pool2d");
  const char* op = "kdp::avg_pool2d";
  const Tensor& x = resolve(input);
  check_defined(op, x, "input");
  const PoolGeometry g = geometry(op, x, kernel_size, stride, padding, 1, ceil_mode);
  Tensor out = Tensor::empty(output_shape(x, g), x.device());
  if (out.numel() > 0) avg_forward(x.device(), out.flat(), x.cflat(), g, count_include_pad);
  return record(out, x, op, PoolKind::Avg, g, Tensor(), count_include_pad);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  trace::Region region("kdp::adaptive_avg_pool2d");
  const char* op = "kdp::adaptive_avg_pool2d";
  const Tensor& x = resolve(input);
  check_defined(op, x, "input");
  KDP_CHECK_FOR(op, x.dim() == 4 || x.dim() == 3, ShapeError,
                "input {} is not [batch, channels, height, width] or "
                "[channels, height, width]",
                x.shape().str());
  const int r = x.dim();
  PoolGeometry g{};
  g.h = x.size(r - 2);
  g.w = x.size(r - 1);
  g.planes = x.numel() / std::max<int64_t>(1, g.h * g.w);
  g.oh = output_size.h;
  g.ow = output_size.w;
  KDP_CHECK_FOR(op, g.oh >= 1 && g.ow >= 1 && g.h >= 1 && g.w >= 1, ShapeError,
                "output size {} must be >= 1, and the input {} non-empty", output_size.str(),
                x.shape().str());
  Tensor out = Tensor::empty(output_shape(x, g), x.device());
  if (out.numel() > 0) adaptive_forward(x.device(), out.flat(), x.cflat(), g);
  return record(out, x, op, PoolKind::Adaptive, g, Tensor(), false);
}

namespace {

// A 1-d pool as its 2-d one over [N, C, 1, L].
template <class Pool>
Tensor pool1d(const char* op, const Tensor& input, const Pool& pool) {
  KDP_CHECK_FOR(op, input.defined() && input.dim() == 3, ShapeError,
                "input {} must be [batch, channels, length]",
                input.defined() ? input.describe() : std::string("(undefined)"));
  const Tensor out = pool(input.reshape({input.size(0), input.size(1), 1, input.size(2)}));
  return out.reshape({out.size(0), out.size(1), out.size(3)});
}

}  // namespace

namespace {

// The leading dimensions of a [N, C, D, H, W] or [C, D, H, W] input, checked
// against a 3-d pool's arguments with the pool's name.
std::vector<int64_t> check_pool3d(const char* op, const Tensor& x, Size3 kernel, Size3 stride,
                                  Size3 padding, Size3 dilation, bool ceil_mode) {
  KDP_CHECK_FOR(op, x.defined() && (x.dim() == 5 || x.dim() == 4), ShapeError,
                "input {} is not [batch, channels, depth, height, width] or "
                "[channels, depth, height, width]",
                x.defined() ? x.describe() : std::string("(undefined)"));
  const int64_t k[3] = {kernel.d, kernel.h, kernel.w}, s[3] = {stride.d, stride.h, stride.w},
                p[3] = {padding.d, padding.h, padding.w},
                d[3] = {dilation.d, dilation.h, dilation.w};
  for (int i = 0; i < 3; ++i) {
    KDP_CHECK_FOR(op, k[i] >= 1 && s[i] >= 1 && d[i] >= 1 && p[i] >= 0, ValueError,
                  "kernel {}, stride {} and dilation {} must be >= 1 and padding {} >= 0",
                  kernel.str(), stride.str(), dilation.str(), padding.str());
    KDP_CHECK_FOR(op, 2 * p[i] <= k[i], ValueError, "padding {} must be at most half the kernel {}",
                  padding.str(), kernel.str());
    KDP_CHECK_FOR(
        op, window_output_size(x.size(x.dim() - 3 + i), k[i], s[i], p[i], d[i], ceil_mode) >= 1,
        ShapeError, "a {} window (padding {}, dilation {}) does not fit the input {}", kernel.str(),
        padding.str(), dilation.str(), x.shape().str());
  }
  std::vector<int64_t> lead = x.shape().to_vector();
  lead.resize(lead.size() - 3);
  return lead;
}

// A 3-d pool as two 2-d ones: over (H, W) in every depth slice, then over D
// in every (oh, ow) column. A box's maximum is the maximum of its slices'
// maxima (the first of equal maxima in (z, y, x) order, as PyTorch's scan),
// and its mean the mean of their means: the divisor of a box is the product
// of its sides, with or without the padding. `pool(x, kernel, stride,
// padding, dilation)` is the 2-d pool.
template <class Pool>
Tensor pool3d(const Tensor& x, const std::vector<int64_t>& lead, Size3 k, Size3 s, Size3 p, Size3 d,
              const Pool& pool) {
  const int r = x.dim();
  const int64_t depth = x.size(r - 3),
                planes =
                    x.numel() / std::max<int64_t>(1, x.size(r - 3) * x.size(r - 2) * x.size(r - 1));
  const Tensor slices = pool(x.reshape({planes, depth, x.size(r - 2), x.size(r - 1)}),
                             Size2(k.h, k.w), Size2(s.h, s.w), Size2(p.h, p.w), Size2(d.h, d.w));
  const int64_t oh = slices.size(2), ow = slices.size(3);
  const Tensor boxes = pool(slices.reshape({planes, depth, oh * ow}), Size2(k.d, 1), Size2(s.d, 1),
                            Size2(p.d, 0), Size2(d.d, 1));
  std::vector<int64_t> shape = lead;
  for (int64_t v : {boxes.size(1), oh, ow}) shape.push_back(v);
  return boxes.reshape(shape);
}

}  // namespace

Tensor max_pool3d(const Tensor& input, Size3 kernel_size, std::optional<Size3> stride,
                  Size3 padding, Size3 dilation, bool ceil_mode) {
  trace::Region region("kdp::max_pool3d");
  const Size3 s = stride.value_or(kernel_size);
  const std::vector<int64_t> lead =
      check_pool3d("kdp::max_pool3d", input, kernel_size, s, padding, dilation, ceil_mode);
  return pool3d(input, lead, kernel_size, s, padding, dilation,
                [&](const Tensor& x, Size2 k, Size2 st, Size2 p, Size2 d) {
                  return max_pool2d(x, k, st, p, d, ceil_mode);
                });
}

Tensor avg_pool3d(const Tensor& input, Size3 kernel_size, std::optional<Size3> stride,
                  Size3 padding, bool ceil_mode, bool count_include_pad) {
  trace::Region region("kdp::avg_pool3d");
  const Size3 s = stride.value_or(kernel_size);
  const std::vector<int64_t> lead =
      check_pool3d("kdp::avg_pool3d", input, kernel_size, s, padding, 1, ceil_mode);
  return pool3d(input, lead, kernel_size, s, padding, 1,
                [&](const Tensor& x, Size2 k, Size2 st, Size2 p, Size2) {
                  return avg_pool2d(x, k, st, p, ceil_mode, count_include_pad);
                });
}

Tensor max_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride,
                  int64_t padding, int64_t dilation, bool ceil_mode) {
  const int64_t s = stride.value_or(kernel_size);
  return pool1d("kdp::max_pool1d", input, [&](const Tensor& x) {
    return max_pool2d(x, Size2(1, kernel_size), Size2(1, s), Size2(0, padding), Size2(1, dilation),
                      ceil_mode);
  });
}

Tensor avg_pool1d(const Tensor& input, int64_t kernel_size, std::optional<int64_t> stride,
                  int64_t padding, bool ceil_mode, bool count_include_pad) {
  const int64_t s = stride.value_or(kernel_size);
  return pool1d("kdp::avg_pool1d", input, [&](const Tensor& x) {
    return avg_pool2d(x, Size2(1, kernel_size), Size2(1, s), Size2(0, padding), ceil_mode,
                      count_include_pad);
  });
}

}  // namespace kdp
