// Training steps of the three reference models, as fractions of the GEMM
// roofline measured first in the same run on the same cores. Runs alone or
// under mpirun at any rank count; --kdp_devices N puts N device instances in
// each rank (DataParallel), ranks > 1 use DistributedDataParallel.
//
//   T: 10-100-10 at batch 64 per rank (overhead-bound: time per step)
//   M: 784-256-256-10 at batch 256 per rank (target >= 70 % of the roofline)
//   L: 784-1024-1024-10 at batch 256 per rank (target >= 85 %)
//   H: Horovod's pytorch_mnist CNN, E: pytorch/examples' MNIST CNN, B: a
//      conv-BN-ReLU CNN with global average pooling; V: the vision transformer
//      vit(4,64,6,4,128) (dropout 0.1); batch 64 per rank, images [1, 28, 28]
//   G: the GPT gpt(4,4,128) (dropout 0.1) on windows of 256 random byte
//      tokens, batch 16 windows per rank: samples/s are windows/s, and the
//      tokens/s beside them 256 times that
//      (the suite compares them all with PyTorch on the same shapes)
// Each model also steps with bf16 products (kdp::autocast: "step/M/bf16"); the
// M and L MLPs' bf16 step has the target >= 1.5x their fp32 step's speed.
// A step is SGD with momentum on cross-entropy: 6 x parameters x batch FLOP
// for the MLPs; for the CNNs and the ViT 3 x the forward's multiply-adds x 2.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "kdp/kdp.hpp"
#include "rank_bench.hpp"

using namespace kdp;

namespace {

int devices_per_rank = 1;
bool quick = false;

struct ModelSpec {
  const char* name;
  std::vector<int64_t> sizes;
  int64_t batch;  // per rank
};
const ModelSpec kModels[] = {
    {"T", {10, 100, 10}, 64}, {"M", {784, 256, 256, 10}, 256}, {"L", {784, 1024, 1024, 10}, 256}};

struct CnnSpec {
  const char* name;
  const char* layers;
  int64_t batch;  // per rank
};
const CnnSpec kCnns[] = {
    {"H",
     "conv(10,5),maxpool(2),relu,conv(20,5),dropout2d(0.5),maxpool(2),relu,flatten,linear(50),"
     "relu,dropout(0.5),linear(10)",
     64},
    {"E",
     "conv(32,3),relu,conv(64,3),relu,maxpool(2),dropout(0.25),flatten,linear(128),relu,"
     "dropout(0.5),linear(10)",
     64},
    {"B",
     "conv(32,3,1,1),batchnorm,relu,conv(32,3,1,1),batchnorm,relu,maxpool(2),conv(64,3,1,1),"
     "batchnorm,relu,maxpool(2),gap,flatten,linear(10)",
     64},
    {"V", "vit(4,64,6,4,128)", 64}};

// The small GPT on windows of byte tokens: gpt(4,4,128) at context 256,
// batch 16 per rank (a sample is a window of 256 tokens).
struct TextSpec {
  const char* name;
  const char* layers;
  int64_t context, batch;
};
const TextSpec kTexts[] = {{"G", "gpt(4,4,128)", 256, 16}};
constexpr int64_t kVocab = 256;

// Multiply-adds of one window's forward through gpt(depth, heads, dim): per
// layer the four projections and the feed-forward's two (4 dim) for every
// token, the causal attention's two products over half the keys, and the
// tied head.
double gpt_macs(const nn::LayerSpec& gpt, int64_t context) {
  const double depth = gpt.args[0], dim = gpt.args[2], t = static_cast<double>(context);
  const double layer = t * (4 * dim * dim + 8 * dim * dim) + t * t * dim;
  return depth * layer + t * dim * kVocab;
}

// Multiply-adds of one sample's forward through a vit(patch, dim, depth,
// heads, mlp) on [1, 28, 28] images: the patches' convolution, per layer the
// four projections, the two feed-forward products and attention's two
// (tokens^2 dim), and the head.
double vit_macs(const nn::LayerSpec& vit) {
  const double patch = vit.args[0], dim = vit.args[1], depth = vit.args[2], mlp = vit.args[4];
  const double tokens = (28 / patch) * (28 / patch) + 1;
  const double layer = tokens * (4 * dim * dim + 2 * dim * mlp) + 2 * tokens * tokens * dim;
  return (tokens - 1) * patch * patch * dim + depth * layer + dim * 10;
}

// Multiply-adds of one sample's forward through the convolutions and linear
// layers of `layers` on [1, 28, 28] images.
double forward_macs(const std::vector<nn::LayerSpec>& layers) {
  if (layers.size() == 1 && nn::is_model_word(layers[0].kind)) return vit_macs(layers[0]);
  const std::vector<Shape> shapes = nn::layer_list_shapes(layers, Shape{1, 28, 28});
  double macs = 0;
  Shape in{1, 28, 28};
  for (size_t i = 0; i < layers.size(); ++i) {
    const Shape& out = shapes[i];
    if (layers[i].kind == "conv") {
      macs += static_cast<double>(out.numel()) * in[0] * layers[i].args[1] * layers[i].args[1];
    } else if (layers[i].kind == "linear") {
      macs += static_cast<double>(in[0]) * out[0];
    }
    in = out;
  }
  return macs;
}

// Single-precision GEMM of 1024^3 on every rank at once: the roofline.
void Roofline(benchmark::State& state) {
  using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>;
  const int64_t n = 1024;
  Matrix a("a", n, n), b("b", n, n), c("c", n, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  const ExecSpace space = get_default_device().space();
  dist::Communicator comm = dist::Communicator::world();
  compat::gemm(space, "N", "N", 1.0f, a, b, 0.0f, c);  // warm-up
  for (auto _ : state) {
    state.SetIterationTime(perf::timed_on_all_ranks(comm, [&] {
      compat::gemm(space, "N", "N", 1.0f, a, b, 0.0f, c);
      compat::fence(space, "roofline");
    }));
  }
  const int size = comm.size();
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * size * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Steps of `net` on a batch `x` against targets `y` (class indices; a
// sequence's logits [B, T, V] meet targets [B T]), timed.
void run_steps(benchmark::State& state, const std::shared_ptr<nn::Module>& net, const Tensor& x,
               const Tensor& y, const std::vector<Device>& devs, dist::Communicator& comm,
               Precision precision) {
  std::shared_ptr<nn::Module> model = net;
  if (devices_per_rank > 1) model = std::make_shared<DataParallel>(net, devs);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  nn::Module* runner = model.get();
  if (comm.size() > 1) {
    ddp = std::make_unique<dist::DistributedDataParallel>(model, comm);
    runner = ddp.get();
  }
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  optim::SGD opt(net->named_parameters(), o);
  const int64_t batch = x.size(0);
  auto step = [&] {
    opt.zero_grad(ddp == nullptr);
    Tensor loss;
    {
      autocast mixed(precision, true, devs[0]);
      Tensor out = runner->forward(x);
      if (out.dim() == 3) out = out.reshape({y.numel(), out.size(2)});
      loss = cross_entropy(out, y);
    }
    loss.backward();
    opt.step();
    devs[0].fence("bench_models");
  };
  step();
  step();  // warm: caches filled, buckets built
  for (auto _ : state) state.SetIterationTime(perf::timed_on_all_ranks(comm, step));
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(batch * comm.size()),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

// Class labels 0, 1, ... of `n` samples, cycling through `classes`.
Tensor cycling_labels(int64_t n, int64_t classes, const Device& device) {
  std::vector<float> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<float>(i % static_cast<size_t>(classes));
  return Tensor::from_host(labels, {n}, device);
}

void Step(benchmark::State& state, const ModelSpec& spec, Precision precision) {
  dist::Communicator comm = dist::Communicator::world();
  const auto devs = devices(devices_per_rank);
  manual_seed(0);
  auto net = nn::mlp(spec.sizes, "relu", devs[0]);
  run_steps(state, net, Tensor::randn({spec.batch, spec.sizes.front()}, devs[0]),
            cycling_labels(spec.batch, spec.sizes.back(), devs[0]), devs, comm, precision);
  int64_t params = 0;
  for (size_t i = 0; i + 1 < spec.sizes.size(); ++i)
    params += spec.sizes[i] * spec.sizes[i + 1] + spec.sizes[i + 1];
  const double samples = static_cast<double>(spec.batch * comm.size());
  state.counters["GFLOP/s"] = benchmark::Counter(6.0 * static_cast<double>(params) * samples * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void CnnStep(benchmark::State& state, const CnnSpec& spec, Precision precision) {
  dist::Communicator comm = dist::Communicator::world();
  const auto devs = devices(devices_per_rank);
  manual_seed(0);
  const auto layers = nn::parse_layer_list(spec.layers);
  const bool word = layers.size() == 1 && nn::is_model_word(layers[0].kind);
  const std::shared_ptr<nn::Module> net =
      word ? nn::build_model_word(layers[0], Shape{1, 28, 28}, 10, devs[0])
           : nn::build_layer_list(layers, Shape{1, 28, 28}, devs[0]);
  run_steps(state, net, Tensor::randn({spec.batch, 1, 28, 28}, devs[0]),
            cycling_labels(spec.batch, 10, devs[0]), devs, comm, precision);
  const double samples = static_cast<double>(spec.batch * comm.size());
  state.counters["GFLOP/s"] = benchmark::Counter(6.0 * forward_macs(layers) * samples * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Windows of random byte tokens and their next tokens.
void TextStep(benchmark::State& state, const TextSpec& spec, Precision precision) {
  dist::Communicator comm = dist::Communicator::world();
  const auto devs = devices(devices_per_rank);
  manual_seed(0);
  const auto layers = nn::parse_layer_list(spec.layers);
  const auto net = nn::build_model_word(layers[0], Shape{spec.context}, kVocab, devs[0]);
  std::mt19937 draw(1);
  std::vector<float> ids(static_cast<size_t>(spec.batch * (spec.context + 1)));
  for (float& id : ids) id = static_cast<float>(draw() % kVocab);
  const Tensor window = Tensor::from_host(ids, {spec.batch, spec.context + 1}, devs[0]);
  const Tensor x = contiguous(narrow(window, 1, 0, spec.context));
  const Tensor y = contiguous(narrow(window, 1, 1, spec.context)).reshape({x.numel()});
  run_steps(state, net, x, y, devs, comm, precision);
  const double samples = static_cast<double>(spec.batch * comm.size());
  state.counters["GFLOP/s"] =
      benchmark::Counter(6.0 * gpt_macs(layers[0], spec.context) * samples * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(x.numel() * comm.size()),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  kdp::use_the_cpus_blas_kernels(argv);  // before MPI and Kokkos start
  quick = perf::take_quick_flag(argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--kdp_devices=", 14) == 0)
      devices_per_rank = std::atoi(argv[i] + 14);
  }
  Runtime runtime(argc, argv);
  benchmark::Initialize(&argc, argv);
  const int64_t reps = quick ? 2 : 20;
  benchmark::RegisterBenchmark("roofline/sgemm1024", Roofline)
      ->Iterations(quick ? 2 : 10)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  // Every model in fp32 ("step/L") and in bf16 autocast ("step/L/bf16").
  for (const Precision p : {Precision::fp32, Precision::bf16}) {
    const std::string suffix = p == Precision::bf16 ? "/bf16" : "";
    for (const ModelSpec& m : kModels) {
      const int64_t iters = std::string(m.name) == "T" ? reps * 50 : reps;
      benchmark::RegisterBenchmark((std::string("step/") + m.name + suffix).c_str(),
                                   [&m, p](benchmark::State& s) { Step(s, m, p); })
          ->Iterations(iters)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
    for (const CnnSpec& m : kCnns) {
      benchmark::RegisterBenchmark((std::string("step/") + m.name + suffix).c_str(),
                                   [&m, p](benchmark::State& s) { CnnStep(s, m, p); })
          ->Iterations(quick ? 2 : 10)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
    for (const TextSpec& m : kTexts) {
      benchmark::RegisterBenchmark((std::string("step/") + m.name + suffix).c_str(),
                                   [&m, p](benchmark::State& s) { TextStep(s, m, p); })
          ->Iterations(quick ? 2 : 6)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  perf::RatioReporter loud;
  perf::SilentReporter silent;
  const int rank = runtime.world_rank(), size = runtime.world_size();
  perf::RatioReporter& reporter = rank == 0 ? loud : silent;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  // The Kokkos backend, for the suite's per-machine baselines.
  if (rank == 0) std::printf("backend: %s\n", ExecSpace::name());
  if (rank == 0 && reporter.has("roofline/sgemm1024")) {
    const double roof = reporter.counter("roofline/sgemm1024", "GFLOP/s");
    std::printf("layout: %d rank(s) x %d device(s), %d thread(s) per rank; roofline %.1f GFLOP/s\n",
                size, devices_per_rank, runtime.threads(), roof);
    const double targets[] = {0.0, 0.70, 0.85};
    int k = 0;
    for (const ModelSpec& m : kModels) {
      const std::string name = std::string("step/") + m.name;
      if (!reporter.has(name)) continue;
      const double frac = reporter.counter(name, "GFLOP/s") / roof;
      std::printf(
          "MODEL %s step %.1f us, %.0f samples/s, %.1f GFLOP/s, %.1f %% of the roofline%s\n",
          m.name, reporter.time(name), reporter.counter(name, "samples/s"),
          reporter.counter(name, "GFLOP/s"), 100.0 * frac,
          targets[k] > 0 ? (frac >= targets[k] ? " (target met)" : " (target MISSED)") : "");
      ++k;
    }
    for (const CnnSpec& m : kCnns) {
      const std::string name = std::string("step/") + m.name;
      if (!reporter.has(name)) continue;
      std::printf("MODEL %s step %.2f ms, %.0f samples/s, %.1f GFLOP/s, %.1f %% of the roofline\n",
                  m.name, reporter.time(name), reporter.counter(name, "samples/s"),
                  reporter.counter(name, "GFLOP/s"),
                  100.0 * reporter.counter(name, "GFLOP/s") / roof);
    }
    for (const TextSpec& m : kTexts) {  // samples are windows of m.context tokens
      const std::string name = std::string("step/") + m.name;
      if (!reporter.has(name)) continue;
      std::printf(
          "MODEL %s step %.2f ms, %.1f samples/s, %.1f GFLOP/s, %.1f %% of the roofline "
          "(%.0f tokens/s)\n",
          m.name, reporter.time(name), reporter.counter(name, "samples/s"),
          reporter.counter(name, "GFLOP/s"), 100.0 * reporter.counter(name, "GFLOP/s") / roof,
          reporter.counter(name, "tokens/s"));
    }
    // The same steps with bf16 products (autocast), and the MLPs' gain.
    const std::string layout = std::to_string(size) + "x" + std::to_string(devices_per_rank);
    for (const char* name : {"T", "M", "L", "H", "E", "B", "V", "G"}) {
      const std::string fp32 = std::string("step/") + name, bf16 = fp32 + "/bf16";
      if (!reporter.has(bf16)) continue;
      const bool cnn = std::strchr("HEBVG", name[0]) != nullptr;  // timed in ms
      std::printf("MODEL_BF16 %s step %.*f %s, %.0f samples/s\n", name, cnn ? 2 : 1,
                  reporter.time(bf16), cnn ? "ms" : "us", reporter.counter(bf16, "samples/s"));
      if (!reporter.has(fp32)) continue;
      const double gain = reporter.time(fp32) / reporter.time(bf16);
      if (std::strcmp(name, "M") == 0 || std::strcmp(name, "L") == 0) {
        std::printf("RATIO %-48s %6.3f  (target >= 1.50: %s)\n",
                    (std::string(name) + " bf16 vs fp32 step at " + layout).c_str(), gain,
                    gain >= 1.5 ? "met" : "MISSED");
      } else {
        std::printf("INFO  %s bf16 vs fp32 step at %s: %.2fx\n", name, layout.c_str(), gain);
      }
    }
  }
  benchmark::Shutdown();
  return 0;
}
