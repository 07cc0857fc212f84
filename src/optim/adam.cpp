#include "kdp/optim/adam.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "core/numbers.hpp"
#include "core/parallel_for.hpp"
#include "hyperparameters.hpp"
#include "kdp/core/error.hpp"
#include "kernels/native/host_kernels.hpp"

namespace kdp::optim {

namespace detail {

// Scalars are computed in double and rounded once, as PyTorch passes its
// Python-float hyperparameters: 1 - beta2 from an already rounded float beta2
// would be off by 1e-5 relatively for beta2 = 0.999.
struct AdamStep {
  float beta2, eps, weight_decay;
  float one_minus_beta1, one_minus_beta2;
  float decay;       // 1 - lr weight_decay (decoupled weight decay)
  float step_size;   // lr / (1 - beta1^t)
  float bias2_sqrt;  // sqrt(1 - beta2^t)
  bool decoupled, amsgrad;
};

namespace {

// The same arithmetic as the device kernel below, element by element (the
// build adds no contractions, and vector square roots and divisions round as
// the scalar ones do): over raw host pointers that do not alias, so that the
// compiler vectorizes the divisions and square roots that bound the step.
template <bool Decay, bool Decoupled, bool Amsgrad>
KDP_ALWAYS_INLINE void adam_elements(float* __restrict p, const float* __restrict g,
                                     float* __restrict m, float* __restrict v,
                                     float* __restrict vmax, int64_t n, const AdamStep& s) {
  for (int64_t i = 0; i < n; ++i) {
    float grad = g[i];
    float param = p[i];
    if (Decay) {
      if (Decoupled) {
        param *= s.decay;
      } else {
        grad += s.weight_decay * param;
      }
    }
    const float mi = m[i] + s.one_minus_beta1 * (grad - m[i]);
    const float vi = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    float second = vi;
    if (Amsgrad) {
      second = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = second;
    }
    const float denom = std::sqrt(second) / s.bias2_sqrt + s.eps;
    p[i] = param - s.step_size * (mi / denom);
  }
}

KDP_ALWAYS_INLINE void adam_body(float* __restrict p, const float* __restrict g,
                                 float* __restrict m, float* __restrict v, float* __restrict vmax,
                                 int64_t n, const AdamStep& s) {
  const bool decay = s.weight_decay != 0.0f;
  if (s.amsgrad) {
    if (!decay) return adam_elements<false, false, true>(p, g, m, v, vmax, n, s);
    if (s.decoupled) return adam_elements<true, true, true>(p, g, m, v, vmax, n, s);
    return adam_elements<true, false, true>(p, g, m, v, vmax, n, s);
  }
  if (!decay) return adam_elements<false, false, false>(p, g, m, v, vmax, n, s);
  if (s.decoupled) return adam_elements<true, true, false>(p, g, m, v, vmax, n, s);
  adam_elements<true, false, false>(p, g, m, v, vmax, n, s);
}
KDP_HOST_KERNEL(adam_host, adam_body,
                (float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, float* __restrict vmax, int64_t n, const AdamStep& s),
                (p, g, m, v, vmax, n, s))

}  // namespace

void adam_kernel(const Device& device, View1 p, ConstView1 g, View1 m, View1 v, View1 vmax,
                 AdamStep s) {
  if constexpr (compat::launches_are_synchronous()) {
    float *pd = p.data(), *md = m.data(), *vd = v.data(), *xd = vmax.data();
    const float* gd = g.data();
    kdp::detail::host_chunks("kdp::optim::Adam", device, static_cast<int64_t>(p.extent(0)), 16384,
                             [=](int64_t b, int64_t e) {
                               adam_host(pd + b, gd + b, md + b, vd + b,
                                         xd != nullptr ? xd + b : nullptr, e - b, s);
                             });
    return;
  }
  Kokkos::parallel_for(
      "kdp::optim::Adam", kdp::detail::range(device, static_cast<int64_t>(p.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) {
        float grad = g(i);
        float param = p(i);
        if (s.weight_decay != 0.0f) {
          if (s.decoupled) {
            param *= s.decay;
          } else {
            grad += s.weight_decay * param;
          }
        }
        const float mi = m(i) + s.one_minus_beta1 * (grad - m(i));  // PyTorch's lerp
        const float vi = v(i) * s.beta2 + s.one_minus_beta2 * grad * grad;
        m(i) = mi;
        v(i) = vi;
        float second = vi;
        if (s.amsgrad) {
          second = vmax(i) > vi ? vmax(i) : vi;
          vmax(i) = second;
        }
        const float denom = compat::math::sqrt(second) / s.bias2_sqrt + s.eps;
        p(i) = param - s.step_size * (mi / denom);
      });
}

}  // namespace detail

Adam::Adam(NamedParameters params, AdamOptions options)
    : Adam("Adam", std::move(params), options, false) {}

namespace {

void check_options(const AdamOptions& o, const std::string& type) {
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type),
                o.beta1 >= 0.0 && o.beta1 < 1.0 && o.beta2 >= 0.0 && o.beta2 < 1.0, ValueError,
                "betas ({}, {}) must be in [0, 1)", o.beta1, o.beta2);
  KDP_CHECK_FOR(KDP_ORIGIN_NAMED(type),
                kdp::detail::is_finite_nonnegative(o.eps) &&
                    kdp::detail::is_finite_nonnegative(o.weight_decay),
                ValueError, "eps {} and weight_decay {} must be finite and >= 0", o.eps,
                o.weight_decay);
}

}  // namespace

Adam::Adam(std::string type, NamedParameters params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(type), std::move(params), options.lr),
      options_(options),
      decoupled_(decoupled) {
  check_options(options, this->type());
}

void Adam::update(const std::string& name, Tensor& param, const Tensor& grad) {
  auto& st = tensor_state_[name];
  for (const char* key : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    if (!options_.amsgrad && key[0] == 'm') continue;
    if (!st[key].defined()) {
      st[key] = Tensor::empty_labeled(param.shape(), param.device(),
                                      "kdp::optim::" + type() + "::" + key);
      st[key].zero_();
    }
  }
  double& step = scalar_state_[name]["step"];
  step += 1.0;
  detail::AdamStep s;
  s.beta2 = static_cast<float>(options_.beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - options_.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - options_.beta2);
  s.decay = static_cast<float>(1.0 - lr() * options_.weight_decay);
  s.eps = static_cast<float>(options_.eps);
  s.weight_decay = static_cast<float>(options_.weight_decay);
  s.step_size = static_cast<float>(lr() / (1.0 - std::pow(options_.beta1, step)));
  s.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, step)));
  s.decoupled = decoupled_;
  s.amsgrad = options_.amsgrad;
  detail::adam_kernel(param.device(), param.flat(), grad.cflat(), st["exp_avg"].flat(),
                      st["exp_avg_sq"].flat(),
                      options_.amsgrad ? st["max_exp_avg_sq"].flat() : View1(), s);
}

namespace {
const detail::Field<AdamOptions> kFields[] = {{"beta1", &AdamOptions::beta1},
                                              {"beta2", &AdamOptions::beta2},
                                              {"eps", &AdamOptions::eps},
                                              {"weight_decay", &AdamOptions::weight_decay},
                                              {"amsgrad", nullptr, &AdamOptions::amsgrad}};
}  // namespace

std::map<std::string, double> Adam::hyperparameters() const {
  return detail::to_map(options_, kFields);
}

AdamOptions Adam::options_from(const std::map<std::string, double>& v) const {
  return detail::from_map(options_, lr(), v, kFields);
}

std::string Adam::hyperparameter_problem(const std::map<std::string, double>& values) const {
  return refusal([&] { check_options(options_from(values), type()); });
}

void Adam::set_hyperparameters(const std::map<std::string, double>& values) {
  const AdamOptions o = options_from(values);
  check_options(o, type());
  options_ = o;
}

AdamW::AdamW(NamedParameters params, AdamOptions options)
    : Adam("AdamW", std::move(params), options, true) {}

AdamOptions adamw_defaults() {
  AdamOptions o;
  o.weight_decay = 0.01;
  return o;
}

}  // namespace kdp::optim
