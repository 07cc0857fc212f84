#include "exact_gradient.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"

namespace kdp::train::detail {

void ExactGradient::keep_shard() {
  std::vector<std::vector<float>> grads;
  for (const auto& [name, p] : params_) {
    const Tensor g = p.grad();
    grads.push_back(g.defined() ? g.to_vector()
                                : std::vector<float>(static_cast<size_t>(p.numel())));
  }
  kept_.push_back(std::move(grads));
}

void ExactGradient::reduce(int shards) {
  const size_t n = params_.size();
  // Each parameter's grid: the largest magnitude over every shard of every
  // rank (a max is exact), then 2^k with |value| 2^k < 2^62 / shards, so that
  // the sum of all shards fits an int64.
  std::vector<float> largest(n, 0.0f);
  for (const auto& shard : kept_) {
    for (size_t i = 0; i < n; ++i) {
      for (float v : shard[i]) largest[i] = std::max(largest[i], std::fabs(v));
    }
  }
  comm_.allreduce(largest.data(), n, dist::ReduceOp::Max);
  const int headroom = static_cast<int>(std::ceil(std::log2(static_cast<double>(shards)))) + 1;
  for (size_t i = 0; i < n; ++i) {
    Tensor p = params_[i].second;
    const auto count = static_cast<size_t>(p.numel());
    KDP_CHECK(std::isfinite(largest[i]), NumericalError,
              "the gradient of '{}' holds NaN or Inf on some rank", params_[i].first);
    int exponent = 0;
    std::frexp(largest[i], &exponent);  // largest < 2^exponent
    const int k = largest[i] > 0.0f ? 62 - headroom - exponent : 0;
    // Powers of two: the products are exact, llrint rounds to nearest even.
    const double scale = std::ldexp(1.0, k), unscale = std::ldexp(1.0, -k);
    std::vector<int64_t> sum(count, 0);
    for (const auto& shard : kept_) {
      const float* g = shard[i].data();
      int64_t* s = sum.data();
      for (size_t e = 0; e < count; ++e) s[e] += std::llrint(static_cast<double>(g[e]) * scale);
    }
    comm_.allreduce(sum.data(), count, dist::ReduceOp::Sum);
    std::vector<float> out(count);
    for (size_t e = 0; e < count; ++e) {
      out[e] = static_cast<float>(static_cast<double>(sum[e]) * unscale);
    }
    p.set_grad(Tensor::from_host(out, p.shape(), p.device()));
  }
  kept_.clear();
}

std::vector<std::vector<int64_t>> shard_rows(int64_t rows, int rank, int ranks, int shards) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(shards));
  for (int64_t l = 0; l < rows; ++l) {
    const int64_t position = rank + l * ranks;
    out[static_cast<size_t>(position % shards)].push_back(l);
  }
  return out;
}

}  // namespace kdp::train::detail
