#include "kdp/nn/clip_grad.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kernels/native/finite.hpp"
#include "kernels/native/host_kernels.hpp"

namespace kdp::nn {

namespace {

// The gradients that exist, all on one device.
std::vector<Tensor> gradients(const char* op, const std::vector<Tensor>& parameters) {
  std::vector<Tensor> out;
  for (const Tensor& p : parameters) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    KDP_CHECK_FOR(op, out.empty() || g.device() == out.front().device(), DeviceError,
                  "the gradient of {} is on {}, the first one on {}", p.describe(),
                  g.device().str(), out.front().device().str());
    out.push_back(g);
  }
  return out;
}

// out(0) = the sum over all gradients of term(g(i)), in double on the device.
template <class Term>
Tensor sum_over(const char* label, const std::vector<Tensor>& grads, const Term& term) {
  const Device device = grads.empty() ? get_default_device() : grads.front().device();
  Tensor total = Tensor::zeros(Shape{}, device);
  Tensor part = Tensor::empty(Shape{}, device);
  View1 t = total.flat();
  ConstView1 p = part.cflat();
  for (const Tensor& g : grads) {
    ConstView1 v = g.cflat();
    detail::sum_into(
        label, device, part.flat(), g.numel(), 1.0,
        KOKKOS_LAMBDA(const int64_t i) { return term(v(i)); });
    Kokkos::parallel_for(
        label, detail::range(device, 1), KOKKOS_LAMBDA(const int64_t) { t(0) += p(0); });
  }
  return total;
}

struct Square {
  KOKKOS_INLINE_FUNCTION double operator()(float x) const {
    return static_cast<double>(x) * static_cast<double>(x);
  }
};

struct NonFinite {
  KOKKOS_INLINE_FUNCTION double operator()(float x) const {
    return (x - x == 0.0f) ? 0.0 : 1.0;  // NaN and +-Inf give NaN here
  }
};

// non_finite_grad_count on a host backend: the count of each block of every
// gradient over the host threads, then their total.
Tensor host_non_finite_count(const std::vector<Tensor>& grads) {
  const Device device = grads.empty() ? get_default_device() : grads.front().device();
  constexpr int64_t kBlock = 65536;
  std::vector<std::pair<const float*, int64_t>> blocks;
  for (const Tensor& g : grads) {
    for (int64_t b = 0; b < g.numel(); b += kBlock) {
      blocks.emplace_back(g.data() + b, std::min(kBlock, g.numel() - b));
    }
  }
  std::vector<int64_t> counts(blocks.size(), 0);
  const auto* block = blocks.data();
  int64_t* count = counts.data();
  detail::host_chunks("kdp::non_finite_grad_count", device, static_cast<int64_t>(blocks.size()), 1,
                      [=](int64_t b, int64_t) {
                        count[b] = detail::count_non_finite(block[b].first, block[b].second);
                      });
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor out = Tensor::empty(Shape{}, device);
  out.flat()(0) = static_cast<float>(total);
  return out;
}

}  // namespace

Tensor grad_norm(const std::vector<Tensor>& parameters) {
  Tensor total = sum_over("kdp::grad_norm", gradients("kdp::nn::grad_norm", parameters), Square{});
  View1 t = total.flat();
  Kokkos::parallel_for(
      "kdp::grad_norm", detail::range(total.device(), 1),
      KOKKOS_LAMBDA(const int64_t) { t(0) = compat::math::sqrt(t(0)); });
  return total;
}

Tensor clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm) {
  KDP_CHECK(max_norm > 0.0, ValueError, "max_norm {} must be positive", max_norm);
  const std::vector<Tensor> grads = gradients("kdp::nn::clip_grad_norm", parameters);
  Tensor norm = grad_norm(parameters);
  NoGradGuard no_grad;
  ConstView1 n = norm.cflat();
  const float limit = static_cast<float>(max_norm);
  for (const Tensor& g : grads) {
    View1 v = g.flat();
    Kokkos::parallel_for(
        "kdp::clip_grad_norm", detail::range(g.device(), g.numel()),
        KOKKOS_LAMBDA(const int64_t i) {
          const float coef = limit / (n(0) + 1e-6f);
          if (coef < 1.0f) v(i) *= coef;
        });
  }
  return norm;
}

Tensor non_finite_grad_count(const std::vector<Tensor>& parameters) {
  if constexpr (compat::host_accessible_memory()) {
    return host_non_finite_count(gradients("kdp::nn::non_finite_grad_count", parameters));
  }
  return sum_over("kdp::non_finite_grad_count",
                  gradients("kdp::nn::non_finite_grad_count", parameters), NonFinite{});
}

}  // namespace kdp::nn
