#include "kdp/nn/clip_grad.hpp"

#include <fmt/format.h>

#include <cmath>

#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/parallel_for.hpp"

namespace kdp::nn {

namespace detail {
double sum_of_squares(const Device& device, ConstView1 g) {
  double total = 0.0;
  Kokkos::parallel_reduce(
      "kdp::grad_norm", kdp::detail::range(device, static_cast<int64_t>(g.extent(0))),
      KOKKOS_LAMBDA(const int64_t i, double& acc) {
        acc += static_cast<double>(g(i)) * static_cast<double>(g(i));
      },
      total);
  return total;
}
}  // namespace detail

double grad_norm(const std::vector<Tensor>& parameters) {
  double total = 0.0;
  for (const Tensor& p : parameters) {
    const Tensor g = p.grad();
    if (g.defined()) total += detail::sum_of_squares(g.device(), g.cflat());
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm) {
  if (!(max_norm > 0.0)) {
    throw ValueError(
        fmt::format("kdp::nn::clip_grad_norm: max_norm {} must be positive", max_norm));
  }
  const double norm = grad_norm(parameters);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    for (const Tensor& p : parameters) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(static_cast<float>(coef));
    }
  }
  return norm;
}

}  // namespace kdp::nn
