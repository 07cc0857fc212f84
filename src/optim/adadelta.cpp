#include "kdp/optim/adadelta.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "core/numbers.hpp"
#include "core/parallel_for.hpp"
#include "hyperparameters.hpp"
#include "kdp/core/error.hpp"

namespace kdp::optim {

namespace {

namespace math = compat::math;

void adadelta_kernel(const Device& device, View1 p, ConstView1 g, View1 square_avg, View1 acc_delta,
                     float lr, float rho, float eps, float weight_decay) {
  Kokkos::parallel_for(
      "kdp::optim::Adadelta", kdp::detail::range(device, static_cast<int64_t>(p.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) {
        float grad = g(i);
        if (weight_decay != 0.0f) grad += weight_decay * p(i);
        const float v = rho * square_avg(i) + (1.0f - rho) * grad * grad;
        square_avg(i) = v;
        const float d = math::sqrt(acc_delta(i) + eps) / math::sqrt(v + eps) * grad;
        acc_delta(i) = rho * acc_delta(i) + (1.0f - rho) * d * d;
        p(i) -= lr * d;
      });
}

void check_options(const AdadeltaOptions& o) {
  KDP_CHECK(o.rho >= 0.0 && o.rho <= 1.0 && o.eps >= 0.0 && std::isfinite(o.eps) &&
                kdp::detail::is_finite_nonnegative(o.weight_decay) &&
                kdp::detail::is_finite_nonnegative(o.lr),
            ValueError,
            "rho {} must be in [0, 1], and lr {}, eps {} and weight_decay {} "
            "finite and >= 0",
            o.rho, o.lr, o.eps, o.weight_decay);
}

}  // namespace

Adadelta::Adadelta(NamedParameters params, AdadeltaOptions options)
    : Optimizer("Adadelta", std::move(params), options.lr), options_(options) {
  check_options(options);
}

void Adadelta::update(const std::string& name, Tensor& param, const Tensor& grad) {
  auto& st = tensor_state_[name];
  for (const char* key : {"square_avg", "acc_delta"}) {
    if (!st[key].defined()) {
      st[key] = Tensor::empty_labeled(param.shape(), param.device(),
                                      std::string("kdp::optim::Adadelta::") + key);
      st[key].zero_();
    }
  }
  scalar_state_[name]["step"] += 1.0;
  adadelta_kernel(param.device(), param.flat(), grad.cflat(), st["square_avg"].flat(),
                  st["acc_delta"].flat(), static_cast<float>(lr()),
                  static_cast<float>(options_.rho), static_cast<float>(options_.eps),
                  static_cast<float>(options_.weight_decay));
}

namespace {
const detail::Field<AdadeltaOptions> kFields[] = {{"rho", &AdadeltaOptions::rho},
                                                  {"eps", &AdadeltaOptions::eps},
                                                  {"weight_decay", &AdadeltaOptions::weight_decay}};
}  // namespace

std::map<std::string, double> Adadelta::hyperparameters() const {
  return detail::to_map(options_, kFields);
}

AdadeltaOptions Adadelta::options_from(const std::map<std::string, double>& v) const {
  return detail::from_map(options_, lr(), v, kFields);
}

std::string Adadelta::hyperparameter_problem(const std::map<std::string, double>& values) const {
  return refusal([&] { check_options(options_from(values)); });
}

void Adadelta::set_hyperparameters(const std::map<std::string, double>& values) {
  const AdadeltaOptions o = options_from(values);
  check_options(o);
  options_ = o;
}

}  // namespace kdp::optim
