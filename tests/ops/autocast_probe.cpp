// Writes kdp's autocast(bf16) results on fixed inputs for
// autocast_vs_torch.py, which runs PyTorch's autocast on the same inputs:
// DIR/NAME.f32 (raw float32, row-major) for every input and result, and
// DIR/manifest.txt with a line "NAME d0 d1 ..." per array.
//
//   kdp_autocast_probe DIR
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "kdp/kdp.hpp"
#include "probe_writer.hpp"
#include "test_util.hpp"

using namespace kdp;
using kdp::test::leaf;
using kdp::test::ProbeWriter;
using kdp::test::random_tensor;

namespace {

ProbeWriter* out = nullptr;

void put(const std::string& name, const Tensor& t) {
  out->put(name, t);
}

// y = op(a, b[, bias]) under autocast, then backward of y with gy; writes the
// inputs and y and the gradients under `name`.
void probe(const std::string& name, const Shape& a_shape, const Shape& b_shape, bool bias,
           const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& op,
           uint64_t seed) {
  const Tensor a = leaf(random_tensor(a_shape, seed)), b = leaf(random_tensor(b_shape, seed + 1));
  const Tensor c = bias ? leaf(random_tensor({b_shape[0]}, seed + 2)) : Tensor();
  Tensor y;
  {
    autocast mixed(Precision::bf16);
    y = op(a, b, c);
  }
  const Tensor gy = random_tensor(y.shape(), seed + 3);
  y.backward(gy);
  put(name + ".a", a.detach());
  put(name + ".b", b.detach());
  put(name + ".gy", gy);
  put(name + ".y", y.detach());
  put(name + ".ga", a.grad());
  put(name + ".gb", b.grad());
  if (bias) {
    put(name + ".bias", c.detach());
    put(name + ".gbias", c.grad());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kdp_autocast_probe DIR\n");
    return 2;
  }
  Runtime runtime(argc, argv);
  ProbeWriter writer(argv[1]);
  out = &writer;
  probe(
      "linear", {37, 70}, {45, 70}, true,
      [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); }, 1);
  probe(
      "matmul", {33, 70}, {70, 21}, false,
      [](const Tensor& x, const Tensor& m, const Tensor&) { return matmul(x, m); }, 11);
  probe(
      "conv", {4, 8, 12, 12}, {6, 8, 3, 3}, true,
      [](const Tensor& x, const Tensor& w, const Tensor& b) { return conv2d(x, w, b, 1, 1); }, 21);
  probe(
      "conv_strided", {3, 3, 11, 10}, {5, 3, 5, 5}, true,
      [](const Tensor& x, const Tensor& w, const Tensor& b) { return conv2d(x, w, b, 2, 0); }, 31);
  return writer.close() ? 0 : 1;
}
