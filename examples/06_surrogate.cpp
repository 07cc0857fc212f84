// A surrogate model for a PDE: the 2-D heat equation
//
//   du/dt = div(k grad u) + q   on the unit square, u = 0 on its boundary,
//
// with a random conductivity field k and random heat sources q, from u = 0 to
// time T. `generate` solves it with Kokkos (explicit finite differences, every
// sample of a file at once) and writes the files a simulation campaign would:
// one HDF5 file per job, /fields [N, 2, G, G] (k and q) and /temperature
// [N, 1, G, G] (u at T), written with HDF5's own C API. kdp-train then learns
// the map from (k, q) to u with a CNN, data-parallel over the files as one
// dataset. `evaluate` solves fresh samples, runs the trained surrogate on
// them, and reports its error and its speed-up over the solver.
//
//   06_surrogate generate DIR [files] [samples per file] [grid] [seed]
//   mpirun -np 2 kdp-train --data 'DIR/heat-*.h5' --inputs /fields --targets /temperature
//       --model 'conv(16,3,1,1),relu,conv(16,3,1,1),relu,conv(16,3,1,1),relu,conv(1,3,1,1)'
//       --checkpoint-dir CK   (one command)
//   06_surrogate evaluate CK/best.h5 [samples] [grid]
//
// scripts/demo.sh runs all three with KDP_DEMO_MODEL=surrogate.
#include <hdf5.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kdp/kdp.hpp"

using namespace kdp;

namespace {

using Field = Kokkos::View<float***, Kokkos::LayoutRight, MemSpace>;  // [sample, row, column]

constexpr double kTime = 0.01;         // T: a diffusion length of about 0.1 (3 cells at G = 32)
constexpr float kSourceScale = 50.0f;  // q in the file is q / 50: both channels of order 1

// Random smooth fields: k = 1 + three Gaussian bumps (1 <= k <= 5), q = two
// Gaussian sources, for `n` samples on a G x G grid (host memory, [n, 2, G, G]).
std::vector<float> random_inputs(int64_t n, int g, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> x(static_cast<size_t>(n * 2 * g * g));
  for (int64_t s = 0; s < n; ++s) {
    float* k = &x[static_cast<size_t>(s * 2 * g * g)];
    float* q = k + g * g;
    for (int i = 0; i < g * g; ++i) k[i] = 1.0f, q[i] = 0.0f;
    for (int b = 0; b < 5; ++b) {
      const double cx = u(gen), cy = u(gen), width = 0.05 + 0.15 * u(gen);
      const double amplitude = b < 3 ? 4.0 / 3.0 * u(gen) : 0.2 + 0.8 * u(gen);
      float* target = b < 3 ? k : q;
      for (int i = 0; i < g; ++i) {
        for (int j = 0; j < g; ++j) {
          const double y = (i + 1.0) / (g + 1.0) - cy, xx = (j + 1.0) / (g + 1.0) - cx;
          target[i * g + j] +=
              static_cast<float>(amplitude * std::exp(-(xx * xx + y * y) / (2 * width * width)));
        }
      }
    }
  }
  return x;
}

// u at time T for every sample of `x` ([n, 2, G, G] host), solved on the
// default device: forward Euler on the 5-point stencil with face conductivities
// the mean of their cells', dt a fifth of the stability limit. Returns
// [n, 1, G, G] and the number of steps.
std::vector<float> solve(const std::vector<float>& x, int64_t n, int g, int* steps_out) {
  const float h = 1.0f / static_cast<float>(g + 1);
  float k_max = 0.0f;
  for (int64_t s = 0; s < n; ++s) {
    for (int i = 0; i < g * g; ++i)
      k_max = std::max(k_max, x[static_cast<size_t>(s * 2 * g * g + i)]);
  }
  const double dt_limit = 0.25 * h * h / k_max;  // forward Euler's, in 2-D
  const int steps = static_cast<int>(std::ceil(kTime / (0.2 * dt_limit)));
  const float dt = static_cast<float>(kTime / steps);
  Field k("k", n, g, g), q("q", n, g, g), u("u", n, g, g), next("next", n, g, g);
  auto hk = Kokkos::create_mirror_view(k), hq = Kokkos::create_mirror_view(q);
  for (int64_t s = 0; s < n; ++s) {
    for (int i = 0; i < g; ++i) {
      for (int j = 0; j < g; ++j) {
        hk(s, i, j) = x[static_cast<size_t>(((s * 2) * g + i) * g + j)];
        hq(s, i, j) = kSourceScale * x[static_cast<size_t>(((s * 2 + 1) * g + i) * g + j)];
      }
    }
  }
  Kokkos::deep_copy(k, hk);
  Kokkos::deep_copy(q, hq);
  const float c = dt / (h * h);
  using Cells = Kokkos::MDRangePolicy<Kokkos::Rank<3>, Kokkos::IndexType<int64_t>>;
  const Cells cells({int64_t{0}, int64_t{0}, int64_t{0}}, {n, int64_t{g}, int64_t{g}});
  for (int t = 0; t < steps; ++t) {
    Kokkos::parallel_for(
        "heat step", cells, KOKKOS_LAMBDA(const int64_t s, const int64_t i, const int64_t j) {
          const float ui = u(s, i, j), ki = k(s, i, j);
          float flux = 0.0f;  // sum over the 4 faces of k_face (u_neighbour - u), u = 0 outside
          if (i > 0)
            flux += 0.5f * (ki + k(s, i - 1, j)) * (u(s, i - 1, j) - ui);
          else
            flux -= ki * ui;
          if (i + 1 < g)
            flux += 0.5f * (ki + k(s, i + 1, j)) * (u(s, i + 1, j) - ui);
          else
            flux -= ki * ui;
          if (j > 0)
            flux += 0.5f * (ki + k(s, i, j - 1)) * (u(s, i, j - 1) - ui);
          else
            flux -= ki * ui;
          if (j + 1 < g)
            flux += 0.5f * (ki + k(s, i, j + 1)) * (u(s, i, j + 1) - ui);
          else
            flux -= ki * ui;
          next(s, i, j) = ui + c * flux + dt * q(s, i, j);
        });
    std::swap(u, next);
  }
  auto hu = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), u);
  std::vector<float> out(static_cast<size_t>(n * g * g));
  for (int64_t s = 0; s < n; ++s) {
    for (int i = 0; i < g; ++i) {
      for (int j = 0; j < g; ++j) out[static_cast<size_t>((s * g + i) * g + j)] = hu(s, i, j);
    }
  }
  *steps_out = steps;
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One float32 dataset of `dims` in an open HDF5 file.
void write_dataset(hid_t file, const char* name, const std::vector<hsize_t>& dims,
                   const std::vector<float>& values) {
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d =
      H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok =
      d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0;
  if (d >= 0) H5Dclose(d);
  H5Sclose(space);
  if (!ok) throw IOError(std::string("cannot write the dataset ") + name);
}

void write_attribute(hid_t file, const char* name, double value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, name, H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, &value);
  H5Aclose(a);
  H5Sclose(space);
}

int generate(const std::string& dir, int files, int64_t samples, int g, uint64_t seed) {
  std::filesystem::create_directories(dir);
  double solver_seconds = 0.0;
  for (int f = 0; f < files; ++f) {
    const std::vector<float> x = random_inputs(samples, g, seed + static_cast<uint64_t>(f));
    int steps = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::vector<float> u = solve(x, samples, g, &steps);
    const double took = seconds_since(start);
    solver_seconds += took;
    char name[64];
    std::snprintf(name, sizeof(name), "heat-%03d.h5", f);
    const std::string path = dir + "/" + name;
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) throw IOError("cannot create '" + path + "' (it may exist already)");
    const auto n = static_cast<hsize_t>(samples), side = static_cast<hsize_t>(g);
    write_dataset(file, "fields", {n, 2, side, side}, x);
    write_dataset(file, "temperature", {n, 1, side, side}, u);
    write_attribute(file, "solver_seconds_per_sample", took / static_cast<double>(samples));
    write_attribute(file, "time_steps", steps);
    H5Fclose(file);
    std::printf("%s: %lld samples of %dx%d, %d explicit steps each, %.2f ms per sample\n",
                path.c_str(), static_cast<long long>(samples), g, g, steps,
                1e3 * took / static_cast<double>(samples));
  }
  std::printf("solver: %.2f ms per sample over %d file(s)\n",
              1e3 * solver_seconds / static_cast<double>(files * samples), files);
  return 0;
}

int evaluate(const std::string& checkpoint, int64_t samples, int g) {
  const io::Checkpoint ck = io::read_checkpoint(checkpoint);
  const auto layers = ck.state.run_config.find("model");
  if (layers == ck.state.run_config.end() || !nn::is_layer_list(layers->second)) {
    throw ValueError("'" + checkpoint + "' records no layer list of kdp-train's --model");
  }
  const Device device = get_default_device();
  auto model = nn::build_layer_list(nn::parse_layer_list(layers->second), Shape{2, g, g}, device);
  model->load_state_dict(ck.model);
  model->eval();
  // kdp-train's normalisation, as the checkpoint records it: one mean and
  // deviation (--normalise global) or one per channel (channel), and the
  // targets' (--standardise-targets).
  const auto& v = ck.state.values;
  const auto& series = ck.state.series;
  const auto value = [&](const std::string& key, double fallback) {
    const auto it = v.find(key);
    return static_cast<float>(it == v.end() ? fallback : it->second);
  };
  // A recorded list (or, from checkpoints that kept one attribute per
  // channel, "<key>.<c>"), else `fallback` for each of `n` channels.
  const auto list = [&](const std::string& key, size_t n, float fallback) {
    const auto it = series.find(key);
    if (it != series.end()) return std::vector<float>(it->second.begin(), it->second.end());
    std::vector<float> out;
    for (size_t c = 0; c < n; ++c) out.push_back(value(key + "." + std::to_string(c), fallback));
    return out;
  };
  data::ChannelNormalisation inputs_norm, targets_norm;
  inputs_norm.channel_size = targets_norm.channel_size = int64_t{g} * g;
  inputs_norm.mean = list("data.channel_mean", 2, value("data.mean", 0));
  inputs_norm.stddev = list("data.channel_std", 2, value("data.std", 1));
  if (series.count("targets.mean") > 0 || v.count("targets.mean.0") > 0) {
    targets_norm.mean = list("targets.mean", 1, 0);
    targets_norm.stddev = list("targets.std", 1, 1);
  }

  // Fresh samples (a seed no training file used), solved and predicted.
  std::vector<float> x = random_inputs(samples, g, 1000003);
  int steps = 0;
  auto start = std::chrono::steady_clock::now();
  const std::vector<float> u = solve(x, samples, g, &steps);
  const double solver_seconds = seconds_since(start);
  NoGradGuard no_grad;
  const Tensor inputs = Tensor::from_host(x, {samples, 2, g, g}, device);
  inputs_norm.apply(inputs);
  model->forward(inputs.slice(0, 0, std::min<int64_t>(samples, 8)));  // warm-up
  start = std::chrono::steady_clock::now();
  const Tensor predicted = model->forward(inputs);
  targets_norm.invert(predicted);  // in the targets' units
  const std::vector<float> pred = predicted.to_vector();
  const double surrogate_seconds = seconds_since(start);

  double error = 0.0, norm = 0.0, mean_u = 0.0, spread = 0.0;
  for (float v : u) mean_u += v / static_cast<double>(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    error += (pred[i] - u[i]) * static_cast<double>(pred[i] - u[i]);
    norm += u[i] * static_cast<double>(u[i]);
    spread += (u[i] - mean_u) * (u[i] - mean_u);
  }
  std::printf(
      "surrogate on %lld new samples of %dx%d: relative L2 error %.4f, R2 %.4f; solver %.3f ms "
      "per sample (%d steps), surrogate %.3f ms per sample: speed-up %.1fx (%s)\n",
      static_cast<long long>(samples), g, g, std::sqrt(error / norm), 1.0 - error / spread,
      1e3 * solver_seconds / static_cast<double>(samples), steps,
      1e3 * surrogate_seconds / static_cast<double>(samples), solver_seconds / surrogate_seconds,
      device.str().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Runtime runtime(argc, argv);
  const std::string usage =
      "usage: 06_surrogate generate DIR [files] [samples per file] [grid] [seed]\n"
      "       06_surrogate evaluate CHECKPOINT [samples] [grid]\n";
  try {
    const std::string what = argc > 2 ? argv[1] : "";
    const auto number = [&](int i, long long fallback) {
      return argc > i ? std::atoll(argv[i]) : fallback;
    };
    if (what == "generate") {
      return generate(argv[2], static_cast<int>(number(3, 4)), number(4, 256),
                      static_cast<int>(number(5, 32)), static_cast<uint64_t>(number(6, 1)));
    }
    if (what == "evaluate") {
      return evaluate(argv[2], number(3, 256), static_cast<int>(number(4, 32)));
    }
    std::fputs(usage.c_str(), stderr);
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "06_surrogate: %s\n", e.what());
    return 1;
  }
}
