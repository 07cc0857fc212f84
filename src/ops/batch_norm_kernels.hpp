#pragma once
// The kernels of batch normalisation, shared by batch_norm() and by
// SyncBatchNorm, which reduces the per-channel sums across devices and ranks
// between them. Inputs are [N, C, ...] seen as [N, C, inner]. Sums are kept in
// double (Σx and Σx² of a million values in float would lose the variance of
// data whose mean is large against its spread).

#include "kdp/core/tensor.hpp"

namespace kdp::ops_detail::bn {

using DoubleView = Kokkos::View<double*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// [N, C, ...] as the three numbers the kernels work with.
struct Layout {
  int64_t n = 0, c = 0, inner = 1;
  int64_t count() const { return n * inner; }  // values per channel
};

/// The layout of `x`, which must be [N, C] or [N, C, ...] (ShapeError naming
/// `op` and the shape otherwise) with `channels` channels when it is > 0.
Layout layout_of(const char* op, const Tensor& x, int64_t channels);

/// `n` doubles in device memory, held by a float tensor from the caching
/// allocator (no allocation of its own in a steady training step).
struct DoubleBuffer {
  Tensor storage;
  DoubleView view;
  DoubleBuffer() = default;
  DoubleBuffer(int64_t n, const Device& device);
  std::vector<double> to_host() const;
  void from_host(const std::vector<double>& values) const;
};

/// sums[c] = Σ x, sums[C + c] = Σ x² over the channel's values.
void channel_sums(const Device& device, DoubleView sums, ConstView1 x, const Layout& l);

/// From the sums of `count` values per channel: mean and 1 / sqrt(biased
/// variance + eps) in float; with `running_mean` (and var) defined, also the
/// update running = (1 - momentum) running + momentum stat, with the unbiased
/// variance, as PyTorch does.
void statistics(const Device& device, View1 mean, View1 invstd, DoubleView sums, double count,
                double eps, View1 running_mean, View1 running_var, bool update_running,
                double momentum, int64_t channels);

/// mean = running_mean, invstd = 1 / sqrt(running_var + eps) (evaluation).
void running_statistics(const Device& device, View1 mean, View1 invstd, ConstView1 running_mean,
                        ConstView1 running_var, double eps, int64_t channels);

/// y = (x - mean) invstd gamma + beta (gamma 1 and beta 0 without `affine`);
/// with `relu`, max(y, 0) as well (NaN stays NaN), in the same pass.
void normalize(const Device& device, View1 y, ConstView1 x, ConstView1 mean, ConstView1 invstd,
               ConstView1 gamma, ConstView1 beta, bool affine, const Layout& l, bool relu = false);

/// A ReLU fused after the normalization (batch_norm_relu): its backward
/// counts dy only where (x - mean) invstd gamma + beta > 0, recomputed from x
/// in normalize()'s float operations (gamma, beta as normalize() had them).
struct FusedRelu {
  bool on = false;
  ConstView1 gamma, beta;
  bool affine = false;
};

/// gsums[c] = Σ dy, gsums[C + c] = Σ dy (x - mean) invstd, dy masked by a
/// fused ReLU.
void gradient_sums(const Device& device, DoubleView gsums, ConstView1 dy, ConstView1 x,
                   ConstView1 mean, ConstView1 invstd, const Layout& l,
                   const FusedRelu& relu = FusedRelu());

/// dx = gamma invstd (dy - Σdy / count - x̂ Σdy x̂ / count) when the
/// statistics came from the batch (`count` values in all, across every
/// device), else dx = gamma invstd dy; dy masked by a fused ReLU as in
/// gradient_sums.
void input_gradient(const Device& device, View1 dx, ConstView1 dy, ConstView1 x, ConstView1 mean,
                    ConstView1 invstd, ConstView1 gamma, bool affine, DoubleView gsums,
                    double count, bool batch_statistics, const Layout& l,
                    const FusedRelu& relu = FusedRelu());

/// dgamma = Σ dy x̂, dbeta = Σ dy, from gradient_sums.
void parameter_gradients(const Device& device, View1 dgamma, View1 dbeta, DoubleView gsums,
                         int64_t channels);

}  // namespace kdp::ops_detail::bn
