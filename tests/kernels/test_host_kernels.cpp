// kdp's host kernels give the same bits whichever instruction set runs them:
// each op's forward and backward at every level the CPU has (capped with
// set_cpu_isa_limit), against the widest.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "core/cpu_isa.hpp"
#include "kernels/native/finite.hpp"
#include "test_util.hpp"

using namespace kdp;
using detail::CpuIsa;
using kdp::test::random_tensor;

namespace {

// The output and the input's gradient of `op` on x of `shape` (odd planes, so
// that every kernel has a vector part and a tail).
struct OpResult {
  std::vector<float> out, grad;
};
OpResult run(const std::function<Tensor(const Tensor&)>& op, const Shape& shape) {
  manual_seed(11);  // dropout's mask
  Tensor x = random_tensor(shape, 3, -2.0f, 2.0f).requires_grad_();
  Tensor y = op(x);
  y.backward(random_tensor(y.shape(), 4, -1.0f, 1.0f));
  return {y.to_vector(), x.grad().to_vector()};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(HostKernels, EveryInstructionSetGivesTheSameBits) {
  const Tensor gamma = random_tensor({6}, 5, 0.5f, 1.5f), beta = random_tensor({6}, 6, -0.5f, 0.5f);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    Shape shape = {5, 6, 13, 11};
  };
  const std::vector<Case> cases = {
      {"batch_norm", [&](const Tensor& x) { return batch_norm(x, {}, {}, gamma, beta, true); }},
      {"batch_norm_relu",
       [&](const Tensor& x) { return batch_norm_relu(x, {}, {}, gamma, beta, true); }},
      {"batch_norm_relu without affine",
       [&](const Tensor& x) { return batch_norm_relu(x, {}, {}, {}, {}, true); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"dropout", [](const Tensor& x) { return dropout(x, 0.3f); }},
      {"max_pool2d 2x2", [](const Tensor& x) { return max_pool2d(x, 2); }},
      {"max_pool2d 3x3 stride 2", [](const Tensor& x) { return max_pool2d(x, 3, Size2(2)); }},
      // 19 windows a row: one of sixteen lanes and a tail of three.
      {"max_pool2d 2x2 on wide rows",
       [](const Tensor& x) { return max_pool2d(x, 2); },
       {2, 3, 6, 38}},
  };
  const CpuIsa widest = detail::cpu_isa_detected();
  for (const Case& c : cases) {
    const OpResult reference = run(c.op, c.shape);
    for (int level = 0; level < static_cast<int>(widest); ++level) {
      const CpuIsa before = detail::set_cpu_isa_limit(static_cast<CpuIsa>(level));
      const OpResult r = run(c.op, c.shape);
      detail::set_cpu_isa_limit(before);
      const char* isa = detail::cpu_isa_name(static_cast<CpuIsa>(level));
      EXPECT_TRUE(same_bits(r.out, reference.out)) << c.name << " forward at " << isa;
      EXPECT_TRUE(same_bits(r.grad, reference.grad)) << c.name << " backward at " << isa;
    }
  }
}

namespace {

// Parameters after three steps of Adam (or AdamW, AMSGrad) on 1003 elements:
// every lane of the vector variants and a tail.
std::vector<float> adam_steps(bool decoupled, bool amsgrad, double weight_decay) {
  Tensor p = random_tensor({1003}, 7, -1.0f, 1.0f).requires_grad_();
  optim::AdamOptions o;
  o.lr = 0.01;
  o.weight_decay = weight_decay;
  o.amsgrad = amsgrad;
  std::unique_ptr<optim::Optimizer> opt;
  if (decoupled) {
    opt = std::make_unique<optim::AdamW>(optim::NamedParameters{{"p", p}}, o);
  } else {
    opt = std::make_unique<optim::Adam>(optim::NamedParameters{{"p", p}}, o);
  }
  for (uint64_t k = 0; k < 3; ++k) {
    p.set_grad(random_tensor({1003}, 8 + k, -1.0f, 1.0f));
    opt->step();
  }
  return p.to_vector();
}

}  // namespace

TEST(HostKernels, AdamGivesTheSameBitsAtEveryInstructionSetAndAsOneElementAtATime) {
  struct Case {
    bool decoupled, amsgrad;
    double weight_decay;
  };
  const CpuIsa widest = detail::cpu_isa_detected();
  for (const Case c : {Case{false, false, 0.0}, Case{false, false, 0.1}, Case{true, false, 0.1},
                       Case{false, true, 0.0}, Case{true, true, 0.05}}) {
    const std::vector<float> reference = adam_steps(c.decoupled, c.amsgrad, c.weight_decay);
    for (int level = 0; level < static_cast<int>(widest); ++level) {
      const CpuIsa before = detail::set_cpu_isa_limit(static_cast<CpuIsa>(level));
      const std::vector<float> r = adam_steps(c.decoupled, c.amsgrad, c.weight_decay);
      detail::set_cpu_isa_limit(before);
      EXPECT_TRUE(same_bits(r, reference))
          << "decoupled " << c.decoupled << " amsgrad " << c.amsgrad << " at "
          << detail::cpu_isa_name(static_cast<CpuIsa>(level));
    }
    // Element 1001 alone, in the same float operations as PyTorch's
    // single-tensor Adam: the vector lanes round as the scalar code does.
    Tensor p = random_tensor({1003}, 7, -1.0f, 1.0f);
    float param = p.to_vector()[1001], m = 0.0f, v = 0.0f, vmax = 0.0f;
    const float lr = 0.01f, eps = 1e-8f, wd = static_cast<float>(c.weight_decay);
    for (uint64_t k = 0; k < 3; ++k) {
      float g = random_tensor({1003}, 8 + k, -1.0f, 1.0f).to_vector()[1001];
      const double t = static_cast<double>(k + 1);
      if (c.weight_decay != 0.0) {
        if (c.decoupled) {
          param *= static_cast<float>(1.0 - 0.01 * c.weight_decay);
        } else {
          g += wd * param;
        }
      }
      m = m + static_cast<float>(1.0 - 0.9) * (g - m);
      v = v * 0.999f + static_cast<float>(1.0 - 0.999) * g * g;
      vmax = std::max(vmax, v);
      const float denom = std::sqrt(c.amsgrad ? vmax : v) /
                              static_cast<float>(std::sqrt(1.0 - std::pow(0.999, t))) +
                          eps;
      param = param - static_cast<float>(lr / (1.0 - std::pow(0.9, t))) * (m / denom);
    }
    EXPECT_EQ(reference[1001], param) << "decoupled " << c.decoupled << " amsgrad " << c.amsgrad;
  }
}

TEST(HostKernels, NonFiniteGradientsAreCountedAcrossBlocksAtEveryInstructionSet) {
  // 150001 elements: blocks of the count, vector lanes and a tail; NaN, +Inf
  // and -Inf planted at 7 places, among them the first and the last element.
  Tensor a = random_tensor({150001}, 9, -1e30f, 1e30f).requires_grad_();
  Tensor b = random_tensor({17}, 10, -1.0f, 1.0f).requires_grad_();
  std::vector<float> g = random_tensor({150001}, 11, -1e38f, 1e38f).to_vector();
  const float bad[] = {std::nanf(""), INFINITY, -INFINITY};
  const size_t at[] = {0, 15, 16, 65535, 65536, 100003, 150000};
  for (size_t k = 0; k < 7; ++k) g[at[k]] = bad[k % 3];
  a.set_grad(Tensor::from_host(g, {150001}));
  b.set_grad(Tensor::from_host(std::vector<float>(17, -std::nanf("")), {17}));
  const CpuIsa widest = detail::cpu_isa_detected();
  for (int level = 0; level <= static_cast<int>(widest); ++level) {
    const CpuIsa before = detail::set_cpu_isa_limit(static_cast<CpuIsa>(level));
    EXPECT_EQ(nn::non_finite_grad_count({a, b}).item(), 7.0f + 17.0f)
        << detail::cpu_isa_name(static_cast<CpuIsa>(level));
    detail::set_cpu_isa_limit(before);
  }
}

TEST(HostKernels, TheFirstNonFiniteValueIsFoundAtEveryInstructionSet) {
  // Around the scan's blocks of 4096 and the vector lanes, and nowhere.
  const int64_t n = 3 * 4096 + 5;
  const std::vector<float> finite = random_tensor({n}, 12, -1e38f, 1e38f).to_vector();
  const CpuIsa widest = detail::cpu_isa_detected();
  for (int level = 0; level <= static_cast<int>(widest); ++level) {
    const CpuIsa before = detail::set_cpu_isa_limit(static_cast<CpuIsa>(level));
    const char* isa = detail::cpu_isa_name(static_cast<CpuIsa>(level));
    EXPECT_EQ(detail::first_non_finite(finite.data(), n), n) << isa;
    // The largest finite floats of either sign: every exponent bit but one set.
    std::vector<float> largest(static_cast<size_t>(n), std::numeric_limits<float>::max());
    for (size_t i = 0; i < largest.size(); i += 3) largest[i] = -largest[i];
    EXPECT_EQ(detail::first_non_finite(largest.data(), n), n) << isa;
    EXPECT_EQ(detail::count_non_finite(largest.data(), n), 0) << isa;
    for (const int64_t at : {int64_t{0}, int64_t{15}, int64_t{4095}, int64_t{4096}, n - 1}) {
      std::vector<float> x = finite;
      x[static_cast<size_t>(at)] = at % 2 == 0 ? -INFINITY : std::nanf("");
      if (at + 3 < n) x[static_cast<size_t>(at + 3)] = INFINITY;  // a later one is not the first
      EXPECT_EQ(detail::first_non_finite(x.data(), n), at) << isa;
      EXPECT_EQ(detail::count_non_finite(x.data(), n), at + 3 < n ? 2 : 1) << isa;
    }
    detail::set_cpu_isa_limit(before);
  }
}
