#include "batch_norm_kernels.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "core/parallel_for.hpp"
#include "kdp/core/error.hpp"

namespace kdp::ops_detail::bn {

namespace math = compat::math;

Layout layout_of(const char* op, const Tensor& x, int64_t channels) {
  KDP_CHECK(x.dim() >= 2, ShapeError, op, "input {} is not [batch, channels, ...]",
            x.shape().str());
  Layout l;
  l.n = x.size(0);
  l.c = x.size(1);
  l.inner = l.n * l.c == 0 ? 0 : x.numel() / (l.n * l.c);
  KDP_CHECK(!(channels > 0 && l.c != channels), ShapeError, op,
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

// Sums of a block of a plane in float, eight lanes at a time (a loop the
// compiler vectorizes; one accumulator would wait on every addition). Blocks
// are short enough for float; the planes' sums add up in double.
constexpr int64_t kLanes = 8, kBlock = 1024;

KOKKOS_INLINE_FUNCTION void block_sums(const float* __restrict p, int64_t len, double& s,
                                       double& s2) {
  for (int64_t b0 = 0; b0 < len; b0 += kBlock) {
    const int64_t b1 = b0 + kBlock < len ? b0 + kBlock : len;
    float a[kLanes] = {}, q[kLanes] = {};
    int64_t i = b0;
    for (; i + kLanes <= b1; i += kLanes) {
      for (int64_t k = 0; k < kLanes; ++k) {
        a[k] += p[i + k];
        q[k] += p[i + k] * p[i + k];
      }
    }
    for (; i < b1; ++i) {
      a[0] += p[i];
      q[0] += p[i] * p[i];
    }
    for (int64_t k = 0; k < kLanes; ++k) {
      s += a[k];
      s2 += q[k];
    }
  }
}

}  // namespace

void channel_sums(const Device& device, DoubleView sums, ConstView1 x, const Layout& l) {
  Kokkos::parallel_for(
      "kdp::batch_norm sums", kdp::detail::range(device, l.c), KOKKOS_LAMBDA(const int64_t c) {
        double s = 0.0, s2 = 0.0;
        for (int64_t n = 0; n < l.n; ++n) block_sums(&x((n * l.c + c) * l.inner), l.inner, s, s2);
        sums(c) = s;
        sums(l.c + c) = s2;
      });
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
               ConstView1 gamma, ConstView1 beta, bool affine, const Layout& l) {
  kdp::detail::for_each_2d(
      "kdp::batch_norm normalize", device, l.n * l.c, l.inner,
      KOKKOS_LAMBDA(const int64_t row, const int64_t i) {
        const int64_t c = row % l.c;
        const float scale = affine ? invstd(c) * gamma(c) : invstd(c);
        const float shift = affine ? beta(c) : 0.0f;
        y(row * l.inner + i) = (x(row * l.inner + i) - mean(c)) * scale + shift;
      });
}

void gradient_sums(const Device& device, DoubleView gsums, ConstView1 dy, ConstView1 x,
                   ConstView1 mean, ConstView1 invstd, const Layout& l) {
  Kokkos::parallel_for(
      "kdp::batch_norm gradient sums", kdp::detail::range(device, l.c),
      KOKKOS_LAMBDA(const int64_t c) {
        // Σ dy and Σ dy (x - mean), in float lanes per block as block_sums.
        double s = 0.0, sx = 0.0;
        const float m = mean(c);
        for (int64_t n = 0; n < l.n; ++n) {
          const float* __restrict g = &dy((n * l.c + c) * l.inner);
          const float* __restrict v = &x((n * l.c + c) * l.inner);
          for (int64_t b0 = 0; b0 < l.inner; b0 += kBlock) {
            const int64_t b1 = b0 + kBlock < l.inner ? b0 + kBlock : l.inner;
            float a[kLanes] = {}, q[kLanes] = {};
            int64_t i = b0;
            for (; i + kLanes <= b1; i += kLanes) {
              for (int64_t k = 0; k < kLanes; ++k) {
                a[k] += g[i + k];
                q[k] += g[i + k] * (v[i + k] - m);
              }
            }
            for (; i < b1; ++i) {
              a[0] += g[i];
              q[0] += g[i] * (v[i] - m);
            }
            for (int64_t k = 0; k < kLanes; ++k) {
              s += a[k];
              sx += q[k];
            }
          }
        }
        gsums(c) = s;
        gsums(l.c + c) = sx * static_cast<double>(invstd(c));
      });
}

void input_gradient(const Device& device, View1 dx, ConstView1 dy, ConstView1 x, ConstView1 mean,
                    ConstView1 invstd, ConstView1 gamma, bool affine, DoubleView gsums,
                    double count, bool batch_statistics, const Layout& l) {
  kdp::detail::for_each_2d(
      "kdp::batch_norm input gradient", device, l.n * l.c, l.inner,
      KOKKOS_LAMBDA(const int64_t row, const int64_t i) {
        const int64_t c = row % l.c;
        const float scale = affine ? invstd(c) * gamma(c) : invstd(c);
        const int64_t k = row * l.inner + i;
        if (!batch_statistics) {
          dx(k) = dy(k) * scale;
          return;
        }
        const float mean_dy = static_cast<float>(gsums(c) / count);
        const float mean_dy_xhat = static_cast<float>(gsums(l.c + c) / count);
        const float xhat = (x(k) - mean(c)) * invstd(c);
        dx(k) = scale * (dy(k) - mean_dy - xhat * mean_dy_xhat);
      });
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
