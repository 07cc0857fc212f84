// Linear layers against raw Kokkos Kernels GEMM, and the explainer's small
// model's full training step.
//
//  - RawGemm/L vs KdpLinear/L: forward + backward of the three Linear layers of a
//    784-1024-1024-10 MLP at batch 256 (3 GEMMs per layer), through kdp and as
//    bare KokkosBlas::gemm calls on preallocated views. Target ratio >= 0.9.
//  - TinyStep: one SGD-momentum + cross-entropy training step of 10-100-10 at
//    batch 64, single-threaded BLAS, with the time of each phase as counters.
//  - TinyGemmFloor: the five bare GEMM calls that step needs (two forward, three
//    backward) on preallocated views: the part of the step no framework can
//    remove with this BLAS.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>

#include "kdp/kdp.hpp"
#include "kernels/native/small_gemm.hpp"
#include "perf_reporter.hpp"

using namespace kdp;

namespace {

struct LayerShape {
  int64_t in, out;
};
const std::vector<LayerShape> kLarge = {{784, 1024}, {1024, 1024}, {1024, 10}};
constexpr int64_t kBatch = 256;

using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>;

void RawGemm(benchmark::State& state) {
  const ExecSpace space = get_default_device().space();
  struct Buffers {
    Matrix x, w, y, gy, gx, gw;
  };
  std::vector<Buffers> bufs;
  for (const auto& l : kLarge) {
    Buffers b{Matrix("x", kBatch, l.in),   Matrix("w", l.out, l.in),   Matrix("y", kBatch, l.out),
              Matrix("gy", kBatch, l.out), Matrix("gx", kBatch, l.in), Matrix("gw", l.out, l.in)};
    Kokkos::deep_copy(b.x, 0.5f);
    Kokkos::deep_copy(b.w, 0.25f);
    Kokkos::deep_copy(b.gy, 0.125f);
    bufs.push_back(b);
  }
  for (auto _ : state) {
    for (auto& b : bufs) {
      compat::gemm(space, "N", "T", 1.0f, b.x, b.w, 0.0f, b.y);
      compat::gemm(space, "N", "N", 1.0f, b.gy, b.w, 0.0f, b.gx);
      compat::gemm(space, "T", "N", 1.0f, b.gy, b.x, 0.0f, b.gw);
    }
    compat::fence(space, "RawGemm");
  }
  double flops = 0;
  for (const auto& l : kLarge) flops += 6.0 * static_cast<double>(kBatch * l.in * l.out);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void KdpLinear(benchmark::State& state) {
  struct Layer {
    Tensor x, w, b, gy;
  };
  std::vector<Layer> layers;
  for (const auto& l : kLarge) {
    Layer layer{Tensor::full({kBatch, l.in}, 0.5f).requires_grad_(),
                Tensor::full({l.out, l.in}, 0.25f).requires_grad_(),
                Tensor::full({l.out}, 0.1f).requires_grad_(),
                Tensor::full({kBatch, l.out}, 0.125f)};
    layers.push_back(layer);
  }
  for (auto _ : state) {
    for (auto& l : layers) {
      l.x.set_grad(Tensor());
      l.w.set_grad(Tensor());
      l.b.set_grad(Tensor());
      Tensor y = linear(l.x, l.w, l.b);
      y.backward(l.gy);
    }
    get_default_device().fence("KdpLinear");
  }
  double flops = 0;
  for (const auto& l : kLarge) flops += 6.0 * static_cast<double>(kBatch * l.in * l.out);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void TinyStep(benchmark::State& state) {
  const int saved_threads = blas_threads();
  set_blas_threads(1);  // "one core": at these sizes BLAS threads only add overhead
  manual_seed(0);
  auto model = nn::mlp({10, 100, 10});
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), o);
  Tensor x = Tensor::randn({64, 10});
  std::vector<float> labels(64);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(i % 10);
  Tensor y = Tensor::from_host(labels, {64});

  using Clock = std::chrono::steady_clock;
  double t_zero = 0, t_fwd = 0, t_loss = 0, t_bwd = 0, t_step = 0;
  for (auto _ : state) {
    const auto a = Clock::now();
    opt.zero_grad();
    const auto b = Clock::now();
    Tensor out = model->forward(x);
    const auto c = Clock::now();
    Tensor loss = cross_entropy(out, y);
    const auto d = Clock::now();
    loss.backward();
    const auto e = Clock::now();
    opt.step();
    const auto f = Clock::now();
    auto us = [](auto from, auto to) {
      return std::chrono::duration<double, std::micro>(to - from).count();
    };
    t_zero += us(a, b);
    t_fwd += us(b, c);
    t_loss += us(c, d);
    t_bwd += us(d, e);
    t_step += us(e, f);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["zero_grad_us"] = t_zero / n;
  state.counters["forward_us"] = t_fwd / n;
  state.counters["loss_us"] = t_loss / n;
  state.counters["backward_us"] = t_bwd / n;
  state.counters["step_us"] = t_step / n;
  set_blas_threads(saved_threads);
}

void TinyGemmFloor(benchmark::State& state) {
  const int saved_threads = blas_threads();
  set_blas_threads(1);
  const ExecSpace space = get_default_device().space();
  Matrix x("x", 64, 10), w1("w1", 100, 10), h("h", 64, 100), w2("w2", 10, 100), o("o", 64, 10);
  Matrix go("go", 64, 10), gh("gh", 64, 100), gw1("gw1", 100, 10), gw2("gw2", 10, 100);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(w1, 0.25f);
  Kokkos::deep_copy(w2, 0.25f);
  Kokkos::deep_copy(go, 0.125f);
  for (auto _ : state) {
    compat::gemm(space, "N", "T", 1.0f, x, w1, 0.0f, h);    // forward, layer 1
    compat::gemm(space, "N", "T", 1.0f, h, w2, 0.0f, o);    // forward, layer 2
    compat::gemm(space, "T", "N", 1.0f, go, h, 0.0f, gw2);  // dW2
    compat::gemm(space, "N", "N", 1.0f, go, w2, 0.0f, gh);  // dH
    compat::gemm(space, "T", "N", 1.0f, gh, x, 0.0f, gw1);  // dW1
    compat::fence(space, "TinyGemmFloor");
  }
  set_blas_threads(saved_threads);
}

// The same five products through kdp's small-GEMM kernel, which the step uses
// where detail::small_gemm_preferred() (AVX2 and FMA, no AVX-512).
void TinySmallGemm(benchmark::State& state) {
  if (!detail::small_gemm_available()) {
    state.SkipWithError("no AVX2 and FMA: the step uses the BLAS");
    return;
  }
  std::vector<float> x(64 * 10, 0.5f), w1(100 * 10, 0.25f), h(64 * 100), w2(10 * 100, 0.25f),
      o(64 * 10), go(64 * 10, 0.125f), gh(64 * 100), gw1(100 * 10), gw2(10 * 100);
  for (auto _ : state) {
    detail::small_gemm(false, true, 64, 100, 10, 1.0f, x.data(), 10, w1.data(), 10, 0.0f, h.data(),
                       100);
    detail::small_gemm(false, true, 64, 10, 100, 1.0f, h.data(), 100, w2.data(), 100, 0.0f,
                       o.data(), 10);
    detail::small_gemm(true, false, 10, 100, 64, 1.0f, go.data(), 10, h.data(), 100, 0.0f,
                       gw2.data(), 100);
    detail::small_gemm(false, false, 64, 100, 10, 1.0f, go.data(), 10, w2.data(), 100, 0.0f,
                       gh.data(), 100);
    detail::small_gemm(true, false, 100, 10, 64, 1.0f, gh.data(), 100, x.data(), 10, 0.0f,
                       gw1.data(), 10);
    benchmark::DoNotOptimize(gw1.data());
  }
}

}  // namespace

BENCHMARK(RawGemm)->Name("RawGemm/L")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(KdpLinear)->Name("KdpLinear/L")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(TinyStep)->Name("TinyStep/T")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(TinyGemmFloor)->Name("TinyGemmFloor/T")->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(TinySmallGemm)->Name("TinySmallGemm/T")->Unit(benchmark::kMicrosecond)->UseRealTime();

int main(int argc, char** argv) {
  kdp::use_the_cpus_blas_kernels(argv);  // before MPI and Kokkos start
  RuntimeOptions options;
  options.init_mpi = false;
  Runtime runtime(argc, argv, options);
  benchmark::Initialize(&argc, argv);
  perf::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratio("Linear fwd+bwd vs raw GEMM (784-1024-1024-10, b256)", "KdpLinear/L",
                       "RawGemm/L", 0.9);
  if (reporter.has("TinyStep/T")) {
    const double us = reporter.time("TinyStep/T");
    std::printf("TIME  %-48s %6.2f us  (target <= 20 us: %s)\n", "10-100-10 training step, b64", us,
                us <= 20.0 ? "met" : "MISSED");
    if (reporter.has("TinyGemmFloor/T"))
      std::printf("INFO  %-48s %6.2f us  (%.0f %% of the step)\n", "its five bare GEMM calls",
                  reporter.time("TinyGemmFloor/T"), 100.0 * reporter.time("TinyGemmFloor/T") / us);
    if (reporter.has("TinySmallGemm/T"))
      std::printf("INFO  %-48s %6.2f us  (%.0f %% of the step)\n",
                  "its five products in kdp's small-GEMM kernel", reporter.time("TinySmallGemm/T"),
                  100.0 * reporter.time("TinySmallGemm/T") / us);
  }
  if (reporter.has("TinySmallGemm/T")) {
    reporter.print_ratio("small-GEMM kernel vs the BLAS on the T model's five products",
                         "TinySmallGemm/T", "TinyGemmFloor/T", 1.0);
  }
  benchmark::Shutdown();
  return 0;
}
