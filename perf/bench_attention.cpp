// scaled_dot_product_attention alone, forward and backward, at the shapes
// where perf/peers/torch_attention.py times PyTorch's SDPA (run_suite.py
// puts the two side by side): [B, H, T, D] = [4, 4, T, 64] (B·H = 16), T 256
// and 1024, causal and not, in fp32 and under bf16 autocast. Prints the best
// of several repetitions:
//
//   ATTENTION kdp T=256 full fp32 fwd+bwd 12.345 ms
//
// and the step's peak memory at T = 2048 against T = 1024 with the same
// tokens per batch (B 1 and 2), in each precision: a fused kernel's memory
// grows with the tokens, a T x T path's with T as well.
//
//   MEMORY attention peak T=2048 / T=1024 1.000 (target <= 1.15)
//   MEMORY attention bf16 peak T=2048 / T=1024 1.000 (target <= 1.15)
//
//   kdp_bench_attention [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "kdp/kdp.hpp"

using namespace kdp;

namespace {

struct Step {
  Tensor q, k, v, gy;
};

Step make(int64_t b, int64_t t, uint64_t seed) {
  const Shape shape{b, 4, t, 64};
  Runtime::get().manual_seed(seed);
  Step s{Tensor::randn(shape), Tensor::randn(shape), Tensor::randn(shape), Tensor::randn(shape)};
  for (Tensor* x : {&s.q, &s.k, &s.v}) x->requires_grad_(true);
  return s;
}

// One forward (in `precision`) and backward; returns its milliseconds.
double run(Step& s, bool causal, Precision precision) {
  for (Tensor* x : {&s.q, &s.k, &s.v}) x->set_grad(Tensor());
  AttentionOptions o;
  o.is_causal = causal;
  const auto start = std::chrono::steady_clock::now();
  Tensor out;
  {
    autocast guard(precision);
    out = scaled_dot_product_attention(s.q, s.k, s.v, o);
  }
  out.backward(s.gy);
  get_default_device().fence("kdp_bench_attention");
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The bytes in use at the peak of one step, its inputs included.
size_t peak_bytes(int64_t b, int64_t t, Precision precision) {
  CachingAllocator& alloc = Runtime::get().allocator();
  alloc.empty_cache();
  alloc.reset_peak();
  const size_t before = alloc.stats().bytes_in_use;
  {
    Step s = make(b, t, 7);
    run(s, true, precision);
  }
  return alloc.stats().peak_bytes_in_use - before;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  Runtime runtime(argc, argv);
  std::printf("backend: %s, %d BLAS thread(s)\n", ExecSpace::name(), blas_threads());
  const int reps = quick ? 1 : 5;
  for (int64_t t : {int64_t{256}, int64_t{1024}}) {
    if (quick && t > 256) continue;
    Step s = make(4, t, 1);
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      for (bool causal : {false, true}) {
        run(s, causal, precision);  // warm-up: the allocator's cache, the threads
        double best = 1e300;
        for (int r = 0; r < reps; ++r) best = std::min(best, run(s, causal, precision));
        std::printf("ATTENTION kdp T=%lld %s %s fwd+bwd %.3f ms\n", static_cast<long long>(t),
                    causal ? "causal" : "full", precision_name(precision), best);
        std::fflush(stdout);
      }
    }
  }
  const int64_t t1 = quick ? 128 : 1024;
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const double ratio = static_cast<double>(peak_bytes(1, 2 * t1, precision)) /
                         static_cast<double>(peak_bytes(2, t1, precision));
    std::printf("MEMORY attention%s peak T=%lld / T=%lld %.3f (target <= 1.15)\n",
                precision == Precision::bf16 ? " bf16" : "", static_cast<long long>(2 * t1),
                static_cast<long long>(t1), ratio);
  }
  return 0;
}
