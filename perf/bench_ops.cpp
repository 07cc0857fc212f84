// Single ops against raw references measured in the same run:
//  - GEMM through kdp::matmul vs raw KokkosBlas::gemm on the same shapes
//    (square 256, 512, 1024 and the L model's 256 x 784 x 1024), ratio >= 0.9;
//  - elementwise ops (relu, add, mul by a scalar, the broadcast bias add) vs a
//    raw Kokkos kernel that reads and writes the same bytes, ratio >= 0.8;
//  - a convolution's forward and backward (input and weight gradients) on the
//    shape of the pytorch/examples CNN's second layer, in GFLOP/s against the
//    raw 1024^3 GEMM's, ratio >= 0.85; in bf16 against the bf16 GEMM's rate
//    (bf16 operands, fp32 accumulation: the bf16 roofline), reported;
//  - conv2d's forward and backward on the layers of the H and E CNNs in fp32
//    and bf16, on the path this build takes (oneDNN, or kdp's im2col and GEMM
//    with KDP_CONV_PATH=im2col: the suite runs both), and the forward against
//    a direct convolution (loops over channels and kernel taps, no BLAS);
//  - conv3d's forward and backward on a volumetric layer (16 -> 32 channels,
//    3x3x3, padding 1, 16^3 volumes, batch 8) on the path this build takes,
//    in GFLOP/s against the raw 1024^3 GEMM's, reported.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "core/parallel_for.hpp"
#include "kdp/kdp.hpp"
#include "kernels/gemm.hpp"
#include "kernels/native/row_gemm.hpp"
#include "kernels/vendor/onednn.hpp"
#include "perf_reporter.hpp"

using namespace kdp;

namespace {

using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>;

struct GemmShape {
  int64_t m, k, n;
};
const std::vector<GemmShape> kShapes = {
    {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {256, 784, 1024}};

void RawGemm(benchmark::State& state) {
  const GemmShape s = kShapes[static_cast<size_t>(state.range(0))];
  Matrix a("a", s.m, s.k), b("b", s.k, s.n), c("c", s.m, s.n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  const ExecSpace space = get_default_device().space();
  for (auto _ : state) {
    compat::gemm(space, "N", "N", 1.0f, a, b, 0.0f, c);
    compat::fence(space, "RawGemm");
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.m * s.k * s.n * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// The bf16 roofline: 1024^3 with operands already in bf16, fp32 accumulation.
void RawGemmBf16(benchmark::State& state) {
  const int64_t n = 1024;
  const Device device = get_default_device();
  Matrix a("a", n, n), b("b", n, n), c("c", n, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  const detail::Bf16Matrix a16 = detail::to_bf16(device, a);
  const detail::Bf16Matrix b16 = detail::to_bf16(device, b);
  for (auto _ : state) {
    detail::gemm_bf16(device, false, false, 1.0f, a16, b16, 0.0f, c);
    device.fence("RawGemmBf16");
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Reproducible mode's row-independent products (row_gemm, row_gemm_bf16) on
// the calling thread, on L's 1024-wide layer at a batch of 240: the forward
// (x W^T), the input gradient (dy W) and the weight gradient (dy^T x).
void RowGemm(benchmark::State& state) {
  const bool bf16 = state.range(0) != 0;
  const auto product = state.range(1);
  const int64_t rows = 240, width = 1024;
  const bool ta = product == 2, tb = product == 0;
  const int64_t m = ta ? width : rows, n = width, k = ta ? rows : width;
  std::vector<float> a(static_cast<size_t>(m * k), 0.5f), b(static_cast<size_t>(k * n), 0.25f),
      c(static_cast<size_t>(m * n));
  const auto run = bf16 ? detail::row_gemm_bf16 : detail::row_gemm;
  for (auto _ : state) {
    run(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void KdpMatmul(benchmark::State& state) {
  const GemmShape s = kShapes[static_cast<size_t>(state.range(0))];
  Tensor a = Tensor::full({s.m, s.k}, 0.5f), b = Tensor::full({s.k, s.n}, 0.25f);
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    get_default_device().fence("KdpMatmul");
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s.m * s.k * s.n * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

constexpr int64_t kRows = 256, kCols = 1024;

// Reads one array and writes another of the same size: what relu, a scalar
// multiply and a bias add move.
void RawStream(benchmark::State& state) {
  Kokkos::View<float*, MemSpace> in("in", kRows * kCols), out("out", kRows * kCols);
  Kokkos::deep_copy(in, 1.5f);
  const Device& d = get_default_device();
  for (auto _ : state) {
    Kokkos::parallel_for(
        "raw stream", kdp::detail::range(d, kRows * kCols),
        KOKKOS_LAMBDA(const int64_t i) { out(i) = in(i)*0.5f; });
    d.fence("RawStream");
  }
  state.SetBytesProcessed(state.iterations() * kRows * kCols * 8);
}

void Elementwise(benchmark::State& state) {
  Tensor x = Tensor::randn({kRows, kCols});
  Tensor y = Tensor::randn({kRows, kCols});
  Tensor bias = Tensor::randn({kCols});
  const int op = static_cast<int>(state.range(0));
  for (auto _ : state) {
    Tensor r;
    switch (op) {
      case 0:
        r = relu(x);
        break;
      case 1:
        r = x * 0.5f;
        break;
      case 2:
        r = x + bias;
        break;
      case 3:
        r = x + y;
        break;  // reads two arrays: 12 bytes per element
    }
    get_default_device().fence("Elementwise");
  }
  state.SetBytesProcessed(state.iterations() * kRows * kCols * (op == 3 ? 12 : 8));
}

// The pytorch/examples MNIST CNN's conv2: 32 -> 64 channels, 3x3, on the 26x26
// maps conv1 leaves, batch 64. Forward, input gradient and weight gradient are
// one GEMM's worth of multiply-adds each.
struct ConvShape {
  int64_t batch = 64, in = 32, out = 64, size = 26, kernel = 3;
  int64_t out_size() const { return size - kernel + 1; }
  double flops() const {
    const double macs = static_cast<double>(batch * out * out_size() * out_size()) *
                        static_cast<double>(in * kernel * kernel);
    return 3.0 * 2.0 * macs;
  }
};

void ConvForwardBackward(benchmark::State& state) {
  const ConvShape s;
  autocast mixed(state.range(0) == 1 ? Precision::bf16 : Precision::fp32);
  Tensor x = Tensor::randn({s.batch, s.in, s.size, s.size}).requires_grad_();
  Tensor w = (Tensor::randn({s.out, s.in, s.kernel, s.kernel}) * 0.1f).detach().requires_grad_();
  Tensor b = Tensor::zeros({s.out}).requires_grad_();
  const Tensor g = Tensor::ones({s.batch, s.out, s.out_size(), s.out_size()});
  for (auto _ : state) {
    for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    conv2d(x, w, b).backward(g);
    get_default_device().fence("ConvForwardBackward");
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// A 3-d convolution layer of a volumetric surrogate: 16 -> 32 channels,
// 3x3x3, padding 1, on 16^3 volumes, batch 8; its product per volume is
// [32, 16 x 27] x [16 x 27, 16^3].
struct Conv3dShape {
  int64_t batch = 8, in = 16, out = 32, size = 16, kernel = 3;
  double flops() const {  // forward, input and weight gradients
    return 3.0 * 2.0 * static_cast<double>(batch * out * size * size * size) *
           static_cast<double>(in * kernel * kernel * kernel);
  }
};

void Conv3dForwardBackward(benchmark::State& state) {
  const Conv3dShape s;
  Tensor x = Tensor::randn({s.batch, s.in, s.size, s.size, s.size}).requires_grad_();
  Tensor w = (Tensor::randn({s.out, s.in, s.kernel, s.kernel, s.kernel}) * 0.05f)
                 .detach()
                 .requires_grad_();
  Tensor b = Tensor::zeros({s.out}).requires_grad_();
  const Tensor g = Tensor::ones({s.batch, s.out, s.size, s.size, s.size});
  for (auto _ : state) {
    for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    conv3d(x, w, b, 1, 1).backward(g);
    get_default_device().fence("Conv3dForwardBackward");
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The convolution layers of the suite's CNNs (batch 64, stride 1, no padding).
struct LayerShape {
  const char* name;
  int64_t in, out, size, kernel;
};
const LayerShape kLayers[] = {{"E conv1 1->32 k3 28x28", 1, 32, 28, 3},
                              {"E conv2 32->64 k3 26x26", 32, 64, 26, 3},
                              {"H conv1 1->10 k5 28x28", 1, 10, 28, 5},
                              {"H conv2 10->20 k5 12x12", 10, 20, 12, 5}};
constexpr int64_t kConvBatch = 64;

double forward_flops(const LayerShape& l) {
  const int64_t o = l.size - l.kernel + 1;
  return 2.0 * static_cast<double>(kConvBatch * l.out * o * o * l.in * l.kernel * l.kernel);
}

void ConvForward(benchmark::State& state) {
  const LayerShape& l = kLayers[state.range(0)];
  const Tensor x = Tensor::randn({kConvBatch, l.in, l.size, l.size});
  const Tensor w = Tensor::randn({l.out, l.in, l.kernel, l.kernel});
  const Tensor b = Tensor::zeros({l.out});
  NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = conv2d(x, w, b);
    get_default_device().fence("ConvForward");
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(forward_flops(l) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Forward and backward (input, weight and bias gradients) of a layer of the
// suite's CNNs, in fp32 (range 1 = 0) or bf16 (1).
void ConvLayerForwardBackward(benchmark::State& state) {
  const LayerShape& l = kLayers[state.range(0)];
  autocast mixed(state.range(1) == 1 ? Precision::bf16 : Precision::fp32);
  const int64_t o = l.size - l.kernel + 1;
  Tensor x = Tensor::randn({kConvBatch, l.in, l.size, l.size}).requires_grad_();
  Tensor w = (Tensor::randn({l.out, l.in, l.kernel, l.kernel}) * 0.1f).detach().requires_grad_();
  Tensor b = Tensor::zeros({l.out}).requires_grad_();
  const Tensor g = Tensor::ones({kConvBatch, l.out, o, o});
  for (auto _ : state) {
    for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    conv2d(x, w, b).backward(g);
    get_default_device().fence("ConvLayerForwardBackward");
  }
  state.counters["GFLOP/s"] = benchmark::Counter(3.0 * forward_flops(l) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// out[n, o, y, x] = b[o] + sum over c, i, j of w[o, c, i, j] in[n, c, y + i, x + j].
void DirectConvForward(benchmark::State& state) {
  const LayerShape& l = kLayers[state.range(0)];
  const int64_t n = kConvBatch, c = l.in, h = l.size, k = l.kernel, oh = h - k + 1;
  std::vector<float> in(static_cast<size_t>(n * c * h * h), 0.5f);
  std::vector<float> w(static_cast<size_t>(l.out * c * k * k), 0.25f);
  std::vector<float> out(static_cast<size_t>(n * l.out * oh * oh));
  for (auto _ : state) {
    for (int64_t img = 0; img < n; ++img) {
      for (int64_t o = 0; o < l.out; ++o) {
        float* po = &out[static_cast<size_t>((img * l.out + o) * oh * oh)];
        std::fill(po, po + oh * oh, 0.0f);
        for (int64_t ch = 0; ch < c; ++ch) {
          const float* pi = &in[static_cast<size_t>((img * c + ch) * h * h)];
          const float* pw = &w[static_cast<size_t>((o * c + ch) * k * k)];
          for (int64_t i = 0; i < k; ++i) {
            for (int64_t j = 0; j < k; ++j) {
              const float wv = pw[i * k + j];
              for (int64_t y = 0; y < oh; ++y) {
                const float* __restrict row = pi + (y + i) * h + j;
                float* __restrict orow = po + y * oh;
                for (int64_t x = 0; x < oh; ++x) orow[x] += wv * row[x];
              }
            }
          }
        }
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(forward_flops(l) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The convolution path this process takes on host backends.
std::string conv_path() {
  const char* asked = std::getenv("KDP_CONV_PATH");
  if (asked != nullptr && std::string(asked) == "im2col") return "im2col";
  return detail::onednn::available() ? "oneDNN" : "im2col";
}

}  // namespace

int main(int argc, char** argv) {
  kdp::use_the_cpus_blas_kernels(argv);  // before MPI and Kokkos start
  RuntimeOptions options;
  options.init_mpi = false;
  Runtime runtime(argc, argv, options);
  benchmark::Initialize(&argc, argv);
  for (size_t i = 0; i < kShapes.size(); ++i) {
    benchmark::RegisterBenchmark("gemm/raw", RawGemm)->Arg(static_cast<int64_t>(i))->UseRealTime();
    benchmark::RegisterBenchmark("gemm/kdp_matmul", KdpMatmul)
        ->Arg(static_cast<int64_t>(i))
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("conv3d/forward_backward", Conv3dForwardBackward)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("elementwise/raw_stream", RawStream)->UseRealTime();
  for (int op = 0; op < 4; ++op) {
    benchmark::RegisterBenchmark("elementwise/kdp", Elementwise)->Arg(op)->UseRealTime();
  }
  benchmark::RegisterBenchmark("gemm/raw_bf16", RawGemmBf16)->UseRealTime();
  for (int64_t bf16 = 0; bf16 < 2; ++bf16) {
    for (int64_t product = 0; product < 3; ++product) {
      benchmark::RegisterBenchmark(bf16 != 0 ? "gemm/row_bf16" : "gemm/row_fp32", RowGemm)
          ->Args({bf16, product})
          ->UseRealTime();
    }
  }
  for (int64_t p = 0; p < 2; ++p) {
    benchmark::RegisterBenchmark("conv/forward_backward_E_conv2", ConvForwardBackward)
        ->Arg(p)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (int64_t i = 0; i < static_cast<int64_t>(std::size(kLayers)); ++i) {
    benchmark::RegisterBenchmark("conv/forward", ConvForward)->Arg(i)->UseRealTime();
    benchmark::RegisterBenchmark("conv/forward_direct", DirectConvForward)->Arg(i)->UseRealTime();
    for (int64_t p = 0; p < 2; ++p) {
      benchmark::RegisterBenchmark("conv/layer_forward_backward", ConvLayerForwardBackward)
          ->Args({i, p})
          ->UseRealTime();
    }
  }
  perf::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const auto& s = kShapes[i];
    const std::string arg = "/" + std::to_string(i);
    reporter.print_ratio("matmul " + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                             std::to_string(s.n) + " vs raw GEMM",
                         "gemm/kdp_matmul" + arg, "gemm/raw" + arg, 0.9);
  }
  const char* names[] = {"relu", "mul scalar", "add bias row", "add"};
  for (int op = 0; op < 4; ++op) {
    // Time per byte moved against the raw kernel's (add moves 1.5x the bytes).
    if (!reporter.has("elementwise/kdp/" + std::to_string(op))) continue;
    const double bytes_ratio = op == 3 ? 1.5 : 1.0;
    const double ratio = reporter.time("elementwise/raw_stream") * bytes_ratio /
                         reporter.time("elementwise/kdp/" + std::to_string(op));
    std::printf("RATIO %-48s %6.3f  (target >= 0.80: %s)\n",
                (std::string(names[op]) + " vs raw stream, per byte").c_str(), ratio,
                ratio >= 0.8 ? "met" : "MISSED");
  }
  const std::string path = conv_path();
  const std::string c3 = "conv3d/forward_backward", g3 = "gemm/raw/2";
  if (reporter.has(c3) && reporter.has(g3)) {
    const double conv = reporter.counter(c3, "GFLOP/s"), gemm = reporter.counter(g3, "GFLOP/s");
    std::printf(
        "CONV3D 16->32 k3 16^3 b8 fwd+bwd on %s: %.1f GFLOP/s, %.3f of the raw 1024^3 "
        "GEMM's %.1f (reported)\n",
        path.c_str(), conv, conv / gemm, gemm);
  }
  for (size_t i = 0; i < std::size(kLayers); ++i) {
    const std::string at = "/" + std::to_string(i);
    const std::string a = "conv/forward" + at, d = "conv/forward_direct" + at;
    if (reporter.has(a) && reporter.has(d)) {
      std::printf("INFO  conv forward %s: %s %.1f GFLOP/s, direct %.1f GFLOP/s\n", kLayers[i].name,
                  path.c_str(), reporter.counter(a, "GFLOP/s"), reporter.counter(d, "GFLOP/s"));
    }
    const std::string f = "conv/layer_forward_backward" + at + "/0";
    const std::string h = "conv/layer_forward_backward" + at + "/1";
    if (reporter.has(f) && reporter.has(h)) {
      std::printf("CONV %s fwd+bwd on %s: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", kLayers[i].name,
                  path.c_str(), reporter.counter(f, "GFLOP/s"), reporter.counter(h, "GFLOP/s"));
    }
  }
  const std::string conv = "conv/forward_backward_E_conv2", roof = "gemm/raw/2";
  if (reporter.has(conv + "/0") && reporter.has(roof)) {
    const double ratio =
        reporter.counter(conv + "/0", "GFLOP/s") / reporter.counter(roof, "GFLOP/s");
    std::printf("INFO  conv 64x32x26x26 * 64x32x3x3 forward+backward %.1f GFLOP/s, raw GEMM %.1f\n",
                reporter.counter(conv + "/0", "GFLOP/s"), reporter.counter(roof, "GFLOP/s"));
    std::printf("RATIO %-48s %6.3f  (target >= 0.85: %s)\n",
                ("conv fwd+bwd (E conv2, " + path + ") vs GEMM roofline").c_str(), ratio,
                ratio >= 0.85 ? "met" : "MISSED");
  }
  if (reporter.has(conv + "/1") && reporter.has("gemm/raw_bf16")) {
    const double bf16 = reporter.counter("gemm/raw_bf16", "GFLOP/s");
    const double ratio = reporter.counter(conv + "/1", "GFLOP/s") / bf16;
    std::printf("INFO  bf16 GEMM 1024^3 (the bf16 roofline) %.1f GFLOP/s, %.2fx the fp32 GEMM\n",
                bf16, reporter.has(roof) ? bf16 / reporter.counter(roof, "GFLOP/s") : 0.0);
    std::printf("SHARE %-48s %6.3f\n",
                ("conv fwd+bwd bf16 (E conv2, " + path + ") vs bf16 GEMM roofline").c_str(), ratio);
  }
  benchmark::Shutdown();
  return 0;
}
