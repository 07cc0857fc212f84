#pragma once
// Helpers shared by the test suites: deterministic host-made tensors, closeness
// checks and a finite-difference gradient checker.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kdp/kdp.hpp"

namespace kdp::test {

// The explainer's 10-100-10 model, corrected to keep the batch (no view(-1)).
class ExplainerModel : public nn::Module {
 public:
  ExplainerModel() : Module("MyModel") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(10, 100));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(100, 10));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
  using Module::forward;

  std::shared_ptr<nn::Linear> fc1, fc2;
};

/// Uniform values in [lo, hi) from a host generator (independent of the device's).
inline std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f,
                            const Device& device = get_default_device()) {
  return Tensor::from_host(random_values(shape.numel(), seed, lo, hi), shape, device);
}

/// Values in [lo, hi) that keep at least `gap` away from every point in `kinks`
/// (so finite differences never straddle a kink of relu, abs, clamp).
inline Tensor random_away_from(const Shape& shape, uint64_t seed, std::vector<float> kinks,
                               float gap, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v = random_values(shape.numel(), seed, lo, hi);
  for (auto& x : v) {
    for (float k : kinks) {
      if (std::fabs(x - k) < gap) x = x < k ? k - gap : k + gap;
    }
  }
  return Tensor::from_host(v, shape);
}

inline void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                         double atol, double rtol, const std::string& what = "") {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double tol = atol + rtol * std::fabs(expected[i]);
    EXPECT_NEAR(actual[i], expected[i], tol) << what << " at element " << i;
  }
}

/// Largest |a - b| / max(|b|, floor) over the elements.
inline double max_relative_error(const std::vector<float>& a, const std::vector<float>& b,
                                 double floor = 1e-6) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    worst = std::max(worst, d / std::max(std::fabs(static_cast<double>(b[i])), floor));
  }
  return worst;
}

struct GradCheckOptions {
  // Central differences in float32: the loss is reduced in double on the host, so
  // the rounding left is float32's in each op (~6e-8 relative), which the division
  // by 2*eps turns into ~1e-5 absolute error for values of order 1; truncation
  // error is eps^2 |f'''| / 6 ~ 1e-6. atol and rtol leave a wide margin over both
  // while still catching any wrong derivative (errors of order 1e-1 or more).
  double eps = 3e-3;
  double atol = 2e-3;
  double rtol = 2e-2;
};

/// Checks d/dx of sum(f(inputs) * w) for random w against central differences,
/// for every element of every input that requires grad.
inline void check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            std::vector<Tensor> inputs, GradCheckOptions opt = {},
                            const std::string& what = "") {
  for (auto& x : inputs) {
    if (x.requires_grad()) x.set_grad(Tensor());
  }
  Tensor y = f(inputs);
  const std::vector<float> w = random_values(y.numel(), 4242, -1.0f, 1.0f);
  y.backward(Tensor::from_host(w, y.shape(), y.device()));

  auto loss = [&](const std::vector<Tensor>& xs) {
    NoGradGuard no_grad;
    const std::vector<float> out = f(xs).to_vector();
    double total = 0.0;
    for (size_t i = 0; i < out.size(); ++i) total += static_cast<double>(out[i]) * w[i];
    return total;
  };

  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    ASSERT_TRUE(inputs[k].grad().defined()) << what << ": input " << k << " got no gradient";
    const std::vector<float> analytic = inputs[k].grad().to_vector();
    std::vector<float> values = inputs[k].to_vector();
    for (size_t i = 0; i < values.size(); ++i) {
      std::vector<Tensor> xs = inputs;
      const float orig = values[i];
      values[i] = orig + static_cast<float>(opt.eps);
      xs[k] = Tensor::from_host(values, inputs[k].shape(), inputs[k].device());
      const double up = loss(xs);
      values[i] = orig - static_cast<float>(opt.eps);
      xs[k] = Tensor::from_host(values, inputs[k].shape(), inputs[k].device());
      const double down = loss(xs);
      values[i] = orig;
      const double numeric = (up - down) / (2.0 * opt.eps);
      EXPECT_NEAR(analytic[i], numeric, opt.atol + opt.rtol * std::fabs(numeric))
          << what << ": d/d input " << k << " element " << i;
    }
  }
}

/// A leaf that requires grad.
inline Tensor leaf(Tensor t) {
  t.requires_grad_(true);
  return t;
}

}  // namespace kdp::test
