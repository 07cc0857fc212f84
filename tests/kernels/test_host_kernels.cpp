// kdp's host kernels give the same bits whichever instruction set runs them:
// each op's forward and backward at every level the CPU has (capped with
// set_cpu_isa_limit), against the widest.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "core/cpu_isa.hpp"
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
