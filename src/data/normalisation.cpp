#include "kdp/data/normalisation.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "core/parallel_for.hpp"
#include "kdp/core/error.hpp"

namespace kdp::data {

namespace {

// Channels and values per channel of one sample of `shape`.
std::pair<int64_t, int64_t> channels_of(const Shape& shape) {
  if (shape.rank() == 0) return {1, 1};
  if (shape.rank() == 1) return {shape[0], 1};
  return {shape[0], shape.numel() / shape[0]};
}

// v = v * scale[c] + shift[c] for every value of a batch.
void affine(const Tensor& batch, const std::vector<float>& scale, const std::vector<float>& shift,
            int64_t channel_size) {
  if (batch.numel() == 0) return;
  const auto channels = static_cast<int64_t>(scale.size());
  const Device& device = batch.device();
  std::vector<float> host(scale);
  host.insert(host.end(), shift.begin(), shift.end());
  const Tensor params = Tensor::from_host(host, {2 * channels}, device);
  View1 v = batch.flat();
  ConstView1 p = params.cflat();
  Kokkos::parallel_for(
      "kdp::data::ChannelNormalisation", kdp::detail::range(device, batch.numel()),
      KOKKOS_LAMBDA(const int64_t i) {
        const int64_t c = (i / channel_size) % channels;
        v(i) = v(i) * p(c) + p(channels + c);
      });
  batch.mark_written();
}

}  // namespace

void ChannelNormalisation::apply(const Tensor& batch) const {
  if (!active()) return;
  std::vector<float> scale(mean.size()), shift(mean.size());
  for (size_t c = 0; c < mean.size(); ++c) {
    scale[c] = 1.0f / stddev[c];
    shift[c] = -mean[c] / stddev[c];
  }
  affine(batch, scale, shift, channel_size);
}

void ChannelNormalisation::invert(const Tensor& batch) const {
  if (active()) affine(batch, stddev, mean, channel_size);
}

ChannelNormalisation channel_moments(const Dataset& dataset, bool targets) {
  const Shape shape = targets ? dataset.label_shape() : dataset.sample_shape();
  const auto [channels, size] = channels_of(shape);
  const int64_t row = dataset.sample_shape().numel(),
                lrow = std::max<int64_t>(1, dataset.label_shape().numel());
  const int64_t block = std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(row, 1));
  std::vector<double> count(static_cast<size_t>(channels), 0.0), mean(count), spread(count);
  std::vector<float> f, l;
  std::vector<int64_t> idx;
  for (int64_t start = 0; start < dataset.size(); start += block) {
    const int64_t n = std::min(block, dataset.size() - start);
    idx.resize(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) idx[static_cast<size_t>(k)] = start + k;
    f.resize(static_cast<size_t>(n * row));
    l.resize(static_cast<size_t>(n * lrow));
    dataset.fetch(idx, f.data(), l.data());
    const std::vector<float>& values = targets ? l : f;
    const int64_t per = targets ? lrow : row;
    // This block's moments per channel, then Chan's combination with the rest.
    for (int64_t c = 0; c < channels; ++c) {
      double s = 0.0;
      const double m = static_cast<double>(n * size);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < size; ++j) s += values[static_cast<size_t>(k * per + c * size + j)];
      const double bm = s / m;
      double bs = 0.0;
      for (int64_t k = 0; k < n; ++k) {
        for (int64_t j = 0; j < size; ++j) {
          const double d = values[static_cast<size_t>(k * per + c * size + j)] - bm;
          bs += d * d;
        }
      }
      const auto cc = static_cast<size_t>(c);
      const double total = count[cc] + m, delta = bm - mean[cc];
      spread[cc] += bs + delta * delta * count[cc] * m / total;
      mean[cc] += delta * m / total;
      count[cc] = total;
    }
  }
  ChannelNormalisation out;
  out.channel_size = size;
  for (size_t c = 0; c < count.size(); ++c) {
    const double sd = count[c] > 0 ? std::sqrt(spread[c] / count[c]) : 0.0;
    KDP_CHECK(std::isfinite(mean[c]) && std::isfinite(sd), NumericalError,
              "channel {} of the {} has no finite mean and spread (mean {}, standard deviation {})",
              c, targets ? "targets" : "features", mean[c], sd);
    out.mean.push_back(static_cast<float>(mean[c]));
    out.stddev.push_back(sd > 0 ? static_cast<float>(sd) : 1.0f);
  }
  return out;
}

}  // namespace kdp::data
