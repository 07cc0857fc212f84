#include "kdp/optim/sgd.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "core/numbers.hpp"
#include "core/parallel_for.hpp"
#include "hyperparameters.hpp"
#include "kdp/core/error.hpp"

namespace kdp::optim {

namespace detail {

void sgd_kernel(const Device& device, View1 p, ConstView1 g, View1 buf, bool first, float lr,
                float momentum, float dampening, float weight_decay, bool nesterov) {
  const bool use_momentum = momentum != 0.0f;
  Kokkos::parallel_for(
      "kdp::optim::SGD", kdp::detail::range(device, static_cast<int64_t>(p.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) {
        float d = g(i);
        if (weight_decay != 0.0f) d += weight_decay * p(i);
        if (use_momentum) {
          const float b = first ? d : momentum * buf(i) + (1.0f - dampening) * d;
          buf(i) = b;
          d = nesterov ? d + momentum * b : b;
        }
        p(i) -= lr * d;
      });
}

}  // namespace detail

namespace {

void check_options(const SGDOptions& o) {
  KDP_CHECK(kdp::detail::is_finite_nonnegative(o.momentum) &&
                kdp::detail::is_finite_nonnegative(o.weight_decay) && std::isfinite(o.dampening),
            ValueError,
            "momentum {} and weight_decay {} must be finite and >= 0, dampening {} "
            "finite",
            o.momentum, o.weight_decay, o.dampening);
  KDP_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), ValueError,
            "Nesterov momentum needs momentum > 0 and dampening = 0");
}

}  // namespace

SGD::SGD(NamedParameters params, SGDOptions options)
    : Optimizer("SGD", std::move(params), options.lr), options_(options) {
  check_options(options);
}

void SGD::update(const std::string& name, Tensor& param, const Tensor& grad) {
  Tensor buf;
  bool first = false;
  if (options_.momentum != 0.0) {
    auto& slot = tensor_state_[name]["momentum_buffer"];
    if (!slot.defined()) {
      slot = Tensor::empty_labeled(param.shape(), param.device(), "kdp::optim::SGD::momentum");
      first = true;
    }
    buf = slot;
  }
  detail::sgd_kernel(param.device(), param.flat(), grad.cflat(),
                     buf.defined() ? buf.flat() : View1(), first, static_cast<float>(lr()),
                     static_cast<float>(options_.momentum), static_cast<float>(options_.dampening),
                     static_cast<float>(options_.weight_decay), options_.nesterov);
}

namespace {
const detail::Field<SGDOptions> kFields[] = {{"momentum", &SGDOptions::momentum},
                                             {"dampening", &SGDOptions::dampening},
                                             {"weight_decay", &SGDOptions::weight_decay},
                                             {"nesterov", nullptr, &SGDOptions::nesterov}};
}  // namespace

std::map<std::string, double> SGD::hyperparameters() const {
  return detail::to_map(options_, kFields);
}

SGDOptions SGD::options_from(const std::map<std::string, double>& v) const {
  return detail::from_map(options_, lr(), v, kFields);
}

std::string SGD::hyperparameter_problem(const std::map<std::string, double>& values) const {
  return refusal([&] { check_options(options_from(values)); });
}

void SGD::set_hyperparameters(const std::map<std::string, double>& values) {
  const SGDOptions o = options_from(values);
  check_options(o);
  options_ = o;
}

}  // namespace kdp::optim
