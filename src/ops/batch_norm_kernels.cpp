#include "batch_norm_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.hpp"
#include "core/parallel_for.hpp"
#include "kdp/core/error.hpp"
#include "kernels/native/host_kernels.hpp"

KDP_LANES_ABI_IS_INTERNAL

namespace kdp::ops_detail::bn {

namespace math = compat::math;

Layout layout_of(const char* op, const Tensor& x, int64_t channels) {
  KDP_CHECK_FOR(op, x.dim() >= 2, ShapeError, "input {} is not [batch, channels, ...]",
                x.shape().str());
  Layout l;
  l.n = x.size(0);
  l.c = x.size(1);
  l.inner = l.n * l.c == 0 ? 0 : x.numel() / (l.n * l.c);
  KDP_CHECK_FOR(op, channels <= 0 || l.c == channels, ShapeError,
                "input {} has {} channels, the layer {}", x.shape().str(), l.c, channels);
  return l;
}

DoubleBuffer::DoubleBuffer(int64_t n, const Device& device)
    : storage(Tensor::empty(Shape{2 * n}, device)),
      view(reinterpret_cast<double*>(storage.data()), static_cast<size_t>(n)) {}

std::vector<double> DoubleBuffer::to_host() const {
  std::vector<double> out(view.extent(0));
  Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
      out.data(), out.size());
  Kokkos::deep_copy(storage.device().space(), host, view);
  storage.device().fence("kdp::batch_norm sums to host");
  return out;
}

void DoubleBuffer::from_host(const std::vector<double>& values) const {
  Kokkos::View<const double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
      values.data(), values.size());
  Kokkos::deep_copy(storage.device().space(), view, host);
  storage.device().fence("kdp::batch_norm sums from host");  // `values` may go away
}

namespace {

// Sums in float lanes per block of a plane (a loop each instruction set
// vectorizes at its width; one accumulator would wait on every addition),
// the blocks' sums added in double: short blocks keep float's rounding small.
// Every variant adds in the same order, so all give the same bits.
constexpr int64_t kLanes = 16, kBlock = 1024;

// s += Σ p, s2 += Σ p² over len values.
KDP_ALWAYS_INLINE void plane_sums_body(const float* __restrict p, int64_t len, double* s,
                                       double* s2) {
  using kdp::detail::Lanes16;
  for (int64_t b0 = 0; b0 < len; b0 += kBlock) {
    const int64_t b1 = std::min(len, b0 + kBlock);
    Lanes16 a = {}, q = {};
    int64_t i = b0;
    for (; i + kLanes <= b1; i += kLanes) {
      const Lanes16 v = kdp::detail::load_lanes(p + i);
      a += v;
      q += v * v;
    }
    float a0 = a[0], q0 = q[0];
    for (; i < b1; ++i) {
      a0 += p[i];
      q0 += p[i] * p[i];
    }
    *s += a0;
    *s2 += q0;
    for (int k = 1; k < kLanes; ++k) {
      *s += a[k];
      *s2 += q[k];
    }
  }
}
KDP_HOST_KERNEL(plane_sums, plane_sums_body,
                (const float* __restrict p, int64_t len, double* s, double* s2), (p, len, s, s2))

// y = (x - mean) scale + shift, and max(y, 0) with relu.
KDP_ALWAYS_INLINE void scale_shift_body(const float* __restrict x, float* __restrict y, int64_t len,
                                        float mean, float scale, float shift, bool relu) {
  if (relu) {
    for (int64_t i = 0; i < len; ++i) {
      const float v = (x[i] - mean) * scale + shift;
      y[i] = v <= 0.0f ? 0.0f : v;  // NaN stays NaN, as relu()
    }
  } else {
    for (int64_t i = 0; i < len; ++i) y[i] = (x[i] - mean) * scale + shift;
  }
}
KDP_HOST_KERNEL(scale_shift, scale_shift_body,
                (const float* __restrict x, float* __restrict y, int64_t len, float mean,
                 float scale, float shift, bool relu),
                (x, y, len, mean, scale, shift, relu))

// A fused ReLU's mask, recomputed from x rather than read from its output:
// the forward's y = (x - mean) scale + shift in the same float operations, so
// "y > 0" is the forward's to the bit, and backward reads one stream less.
struct ReluOf {
  bool on;
  float scale, shift;
};

// g where the fused ReLU's output was positive (all of g without one).
KDP_ALWAYS_INLINE float kept(float g, float xm, const ReluOf& r) {
  return !r.on || xm * r.scale + r.shift > 0.0f ? g : 0.0f;
}

// s += Σ g, sx += Σ g (x - mean), g masked by the fused ReLU.
KDP_ALWAYS_INLINE void gradient_plane_sums_body(const float* __restrict g,
                                                const float* __restrict x, int64_t len, float mean,
                                                const ReluOf& r, double* s, double* sx) {
  using kdp::detail::Lanes16;
  using kdp::detail::load_lanes;
  for (int64_t b0 = 0; b0 < len; b0 += kBlock) {
    const int64_t b1 = std::min(len, b0 + kBlock);
    Lanes16 a = {}, q = {};
    int64_t i = b0;
    if (!r.on) {
      for (; i + kLanes <= b1; i += kLanes) {
        const Lanes16 d = load_lanes(g + i);
        a += d;
        q += d * (load_lanes(x + i) - mean);
      }
    } else {
      for (; i + kLanes <= b1; i += kLanes) {
        const Lanes16 xm = load_lanes(x + i) - mean;
        const Lanes16 d = kdp::detail::where_positive(xm * r.scale + r.shift, load_lanes(g + i));
        a += d;
        q += d * xm;
      }
    }
    float a0 = a[0], q0 = q[0];
    for (; i < b1; ++i) {
      const float xm = x[i] - mean;
      const float d = kept(g[i], xm, r);
      a0 += d;
      q0 += d * xm;
    }
    *s += a0;
    *sx += q0;
    for (int k = 1; k < kLanes; ++k) {
      *s += a[k];
      *sx += q[k];
    }
  }
}
KDP_HOST_KERNEL(gradient_plane_sums, gradient_plane_sums_body,
                (const float* __restrict g, const float* __restrict x, int64_t len, float mean,
                 const ReluOf& r, double* s, double* sx),
                (g, x, len, mean, r, s, sx))

// The input gradient of one plane; see input_gradient().
struct PlaneGradient {
  float mean, invstd, scale, mean_dy, mean_dy_xhat;
  bool batch_statistics;
};
KDP_ALWAYS_INLINE void input_plane_gradient_body(float* __restrict dx, const float* __restrict g,
                                                 const float* __restrict x, int64_t len,
                                                 const PlaneGradient& p, const ReluOf& r) {
  if (!p.batch_statistics) {
    for (int64_t i = 0; i < len; ++i) dx[i] = kept(g[i], x[i] - p.mean, r) * p.scale;
    return;
  }
  for (int64_t i = 0; i < len; ++i) {
    const float xm = x[i] - p.mean;
    const float xhat = xm * p.invstd;
    dx[i] = p.scale * (kept(g[i], xm, r) - p.mean_dy - xhat * p.mean_dy_xhat);
  }
}
KDP_HOST_KERNEL(input_plane_gradient, input_plane_gradient_body,
                (float* __restrict dx, const float* __restrict g, const float* __restrict x,
                 int64_t len, const PlaneGradient& p, const ReluOf& r),
                (dx, g, x, len, p, r))

// The fused ReLU of channel c, as normalize() applied it.
KOKKOS_INLINE_FUNCTION ReluOf relu_of(const FusedRelu& f, ConstView1 invstd, int64_t c) {
  if (!f.on) return ReluOf{false, 0.0f, 0.0f};
  return ReluOf{true, f.affine ? invstd(c) * f.gamma(c) : invstd(c), f.affine ? f.beta(c) : 0.0f};
}

}  // namespace

void channel_sums(const Device& device, DoubleView sums, ConstView1 x, const Layout& l) {
  if constexpr (compat::launches_are_synchronous()) {
    kdp::detail::host_chunks("kdp::batch_norm sums", device, l.c, 1, [=](int64_t c, int64_t) {
      double s = 0.0, s2 = 0.0;
      for (int64_t n = 0; n < l.n; ++n) plane_sums(&x((n * l.c + c) * l.inner), l.inner, &s, &s2);
      sums(c) = s;
      sums(l.c + c) = s2;
    });
  } else {
    Kokkos::parallel_for(
        "kdp::batch_norm sums", kdp::detail::range(device, l.c), KOKKOS_LAMBDA(const int64_t c) {
          double s = 0.0, s2 = 0.0;
          for (int64_t n = 0; n < l.n; ++n) {
            const float* p = &x((n * l.c + c) * l.inner);
            for (int64_t i = 0; i < l.inner; ++i) {
              s += p[i];
              s2 += static_cast<double>(p[i]) * p[i];
            }
          }
          sums(c) = s;
          sums(l.c + c) = s2;
        });
  }
}

void statistics(const Device& device, View1 mean, View1 invstd, DoubleView sums, double count,
                double eps, View1 running_mean, View1 running_var, bool update_running,
                double momentum, int64_t channels) {
  Kokkos::parallel_for(
      "kdp::batch_norm statistics", kdp::detail::range(device, channels),
      KOKKOS_LAMBDA(const int64_t c) {
        const double m = sums(c) / count;
        double var = sums(channels + c) / count - m * m;
        var = var < 0.0 ? 0.0 : var;  // rounding of equal values
        mean(c) = static_cast<float>(m);
        invstd(c) = static_cast<float>(1.0 / math::sqrt(var + eps));
        if (update_running) {
          const double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
          running_mean(c) = static_cast<float>((1.0 - momentum) * running_mean(c) + momentum * m);
          running_var(c) =
              static_cast<float>((1.0 - momentum) * running_var(c) + momentum * unbiased);
        }
      });
}

void running_statistics(const Device& device, View1 mean, View1 invstd, ConstView1 running_mean,
                        ConstView1 running_var, double eps, int64_t channels) {
  Kokkos::parallel_for(
      "kdp::batch_norm running statistics", kdp::detail::range(device, channels),
      KOKKOS_LAMBDA(const int64_t c) {
        mean(c) = running_mean(c);
        invstd(c) = static_cast<float>(1.0 / math::sqrt(static_cast<double>(running_var(c)) + eps));
      });
}

void normalize(const Device& device, View1 y, ConstView1 x, ConstView1 mean, ConstView1 invstd,
               ConstView1 gamma, ConstView1 beta, bool affine, const Layout& l, bool relu) {
  if constexpr (compat::launches_are_synchronous()) {
    kdp::detail::host_chunks("kdp::batch_norm normalize", device, l.n * l.c, 1,
                             [=](int64_t row, int64_t) {
                               const int64_t c = row % l.c;
                               const float scale = affine ? invstd(c) * gamma(c) : invstd(c);
                               scale_shift(&x(row * l.inner), &y(row * l.inner), l.inner, mean(c),
                                           scale, affine ? beta(c) : 0.0f, relu);
                             });
  } else {
    kdp::detail::for_each_2d(
        "kdp::batch_norm normalize", device, l.n * l.c, l.inner,
        KOKKOS_LAMBDA(const int64_t row, const int64_t i) {
          const int64_t c = row % l.c;
          const float scale = affine ? invstd(c) * gamma(c) : invstd(c);
          const float shift = affine ? beta(c) : 0.0f;
          const float v = (x(row * l.inner + i) - mean(c)) * scale + shift;
          y(row * l.inner + i) = relu && v <= 0.0f ? 0.0f : v;
        });
  }
}

void gradient_sums(const Device& device, DoubleView gsums, ConstView1 dy, ConstView1 x,
                   ConstView1 mean, ConstView1 invstd, const Layout& l, const FusedRelu& relu) {
  if constexpr (compat::launches_are_synchronous()) {
    kdp::detail::host_chunks("kdp::batch_norm gradient sums", device, l.c, 1,
                             [=](int64_t c, int64_t) {
                               const ReluOf r = relu_of(relu, invstd, c);
                               double s = 0.0, sx = 0.0;
                               for (int64_t n = 0; n < l.n; ++n) {
                                 const int64_t at = (n * l.c + c) * l.inner;
                                 gradient_plane_sums(&dy(at), &x(at), l.inner, mean(c), r, &s, &sx);
                               }
                               gsums(c) = s;
                               gsums(l.c + c) = sx * static_cast<double>(invstd(c));
                             });
  } else {
    Kokkos::parallel_for(
        "kdp::batch_norm gradient sums", kdp::detail::range(device, l.c),
        KOKKOS_LAMBDA(const int64_t c) {
          const ReluOf r = relu_of(relu, invstd, c);
          double s = 0.0, sx = 0.0;
          const float m = mean(c);
          for (int64_t n = 0; n < l.n; ++n) {
            const int64_t at = (n * l.c + c) * l.inner;
            for (int64_t i = 0; i < l.inner; ++i) {
              const float xm = x(at + i) - m;
              const float d = !r.on || xm * r.scale + r.shift > 0.0f ? dy(at + i) : 0.0f;
              s += d;
              sx += static_cast<double>(d) * xm;
            }
          }
          gsums(c) = s;
          gsums(l.c + c) = sx * static_cast<double>(invstd(c));
        });
  }
}

void input_gradient(const Device& device, View1 dx, ConstView1 dy, ConstView1 x, ConstView1 mean,
                    ConstView1 invstd, ConstView1 gamma, bool affine, DoubleView gsums,
                    double count, bool batch_statistics, const Layout& l, const FusedRelu& relu) {
  if constexpr (compat::launches_are_synchronous()) {
    kdp::detail::host_chunks(
        "kdp::batch_norm input gradient", device, l.n * l.c, 1, [=](int64_t row, int64_t) {
          const int64_t c = row % l.c, at = row * l.inner;
          const PlaneGradient p{mean(c),
                                invstd(c),
                                affine ? invstd(c) * gamma(c) : invstd(c),
                                static_cast<float>(gsums(c) / count),
                                static_cast<float>(gsums(l.c + c) / count),
                                batch_statistics};
          input_plane_gradient(&dx(at), &dy(at), &x(at), l.inner, p, relu_of(relu, invstd, c));
        });
  } else {
    kdp::detail::for_each_2d(
        "kdp::batch_norm input gradient", device, l.n * l.c, l.inner,
        KOKKOS_LAMBDA(const int64_t row, const int64_t i) {
          const int64_t c = row % l.c;
          const float scale = affine ? invstd(c) * gamma(c) : invstd(c);
          const ReluOf r = relu_of(relu, invstd, c);
          const int64_t k = row * l.inner + i;
          const float xm = x(k) - mean(c);
          const float d = !r.on || xm * r.scale + r.shift > 0.0f ? dy(k) : 0.0f;
          if (!batch_statistics) {
            dx(k) = d * scale;
            return;
          }
          const float mean_dy = static_cast<float>(gsums(c) / count);
          const float mean_dy_xhat = static_cast<float>(gsums(l.c + c) / count);
          const float xhat = xm * invstd(c);
          dx(k) = scale * (d - mean_dy - xhat * mean_dy_xhat);
        });
  }
}

void parameter_gradients(const Device& device, View1 dgamma, View1 dbeta, DoubleView gsums,
                         int64_t channels) {
  Kokkos::parallel_for(
      "kdp::batch_norm parameter gradients", kdp::detail::range(device, channels),
      KOKKOS_LAMBDA(const int64_t c) {
        dgamma(c) = static_cast<float>(gsums(channels + c));
        dbeta(c) = static_cast<float>(gsums(c));
      });
}

}  // namespace kdp::ops_detail::bn
