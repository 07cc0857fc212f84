#include "kdp/nn/init.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/core/error.hpp"

namespace kdp::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& w) {
  KDP_CHECK(w.dim() >= 2, ShapeError, "fan in/out need a weight of rank >= 2, got {}",
            w.describe());
  int64_t receptive = 1;
  for (int d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

void uniform_(Tensor& t, float low, float high) {
  Generator& gen = t.device().generator();
  const uint64_t seed = gen.seed();
  const uint64_t base = gen.reserve(static_cast<uint64_t>(t.numel()));
  kdp::detail::fill_rand(t.device(), t.flat(), seed, base, low, high);
  t.mark_written();
}

void normal_(Tensor& t, float mean, float stddev) {
  Generator& gen = t.device().generator();
  const uint64_t seed = gen.seed();
  const uint64_t base = gen.reserve(static_cast<uint64_t>(t.numel()));
  kdp::detail::fill_randn(t.device(), t.flat(), seed, base);
  t.mul_(stddev);
  if (mean != 0.0f) t.add_(Tensor::full(t.shape(), 1.0f, t.device()), mean);
}

void zeros_(Tensor& t) {
  t.fill_(0.0f);
}
void ones_(Tensor& t) {
  t.fill_(1.0f);
}

void kaiming_uniform_(Tensor& t, float a, const std::string& mode) {
  const auto [fan_in, fan_out] = fans(t);
  int64_t fan = 0;
  if (mode == "fan_in") {
    fan = fan_in;
  } else if (mode == "fan_out") {
    fan = fan_out;
  } else {
    KDP_FAIL(ValueError,
             "mode '{}' is neither "
             "'fan_in' nor 'fan_out'",
             mode);
  }
  const double gain = std::sqrt(2.0 / (1.0 + static_cast<double>(a) * a));
  const double bound = fan == 0 ? 0.0 : gain * std::sqrt(3.0 / static_cast<double>(fan));
  if (bound == 0.0) {
    t.zero_();
  } else {
    uniform_(t, static_cast<float>(-bound), static_cast<float>(bound));
  }
}

void xavier_uniform_(Tensor& t, float gain) {
  const auto [fan_in, fan_out] = fans(t);
  const double bound =
      gain * std::sqrt(6.0 / static_cast<double>(std::max<int64_t>(1, fan_in + fan_out)));
  uniform_(t, static_cast<float>(-bound), static_cast<float>(bound));
}

}  // namespace kdp::nn::init
