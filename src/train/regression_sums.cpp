#include "regression_sums.hpp"

#include <cmath>

#include "core/check.hpp"
#include "fit_run.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/ops/elementwise.hpp"
#include "kdp/ops/reduction.hpp"

namespace kdp::train::detail {

RegressionSums::RegressionSums(const Device& device)
    : squared_(Tensor::zeros({}, device)), absolute_(Tensor::zeros({}, device)) {}

void RegressionSums::add(const Tensor& out, const Tensor& target) {
  NoGradGuard no_grad;
  KDP_CHECK(out.numel() == target.numel() && out.dim() >= 1, ShapeError,
            "predictions {} and targets {} do not hold the same number of values", out.describe(),
            target.describe());
  const int64_t n = out.size(0);
  if (n == 0) return;
  const Tensor error = out - target.to(out.device()).reshape(out.shape().to_vector());
  squared_.add_(sum(square(error)).to(squared_.device()));
  absolute_.add_(sum(abs(error)).to(absolute_.device()));
  // Welford's update per component, in double.
  const std::vector<float> y = target.to_vector();
  const int64_t k = out.numel() / n;
  if (components_ == 0) {
    components_ = k;
    mean_.assign(static_cast<size_t>(k), 0.0);
    spread_.assign(static_cast<size_t>(k), 0.0);
  }
  KDP_CHECK(k == components_, ShapeError, "targets {} have {} values per sample, earlier ones {}",
            target.describe(), k, components_);
  for (int64_t s = 0; s < n; ++s) {
    ++samples_;
    const double count = static_cast<double>(samples_);
    for (int64_t c = 0; c < k; ++c) {
      const double v = y[static_cast<size_t>(s * k + c)];
      double& m = mean_[static_cast<size_t>(c)];
      const double delta = v - m;
      m += delta / count;
      spread_[static_cast<size_t>(c)] += delta * (v - m);
    }
  }
}

void RegressionSums::finish(dist::Communicator& comm, EvalResult& r) const {
  const std::vector<float> errors = read_scalars({squared_, absolute_});
  // The components' global means first, then each rank's spread about them
  // (its own spread plus its count times the shift of its mean): a sum of
  // non-negative terms, so no cancellation.
  int64_t k = components_;
  comm.allreduce(&k, 1, dist::ReduceOp::Max);
  std::vector<double> weighted(static_cast<size_t>(k) + 3, 0.0);
  for (size_t c = 0; c < mean_.size(); ++c) weighted[c] = mean_[c] * static_cast<double>(samples_);
  weighted[static_cast<size_t>(k)] = errors[0];
  weighted[static_cast<size_t>(k) + 1] = errors[1];
  weighted[static_cast<size_t>(k) + 2] = static_cast<double>(samples_);
  comm.allreduce(weighted.data(), weighted.size(), dist::ReduceOp::Sum);
  const double samples = weighted[static_cast<size_t>(k) + 2];
  double spread = 0.0;
  for (size_t c = 0; c < mean_.size(); ++c) {
    const double shift = mean_[c] - weighted[c] / samples;
    spread += spread_[c] + static_cast<double>(samples_) * shift * shift;
  }
  comm.allreduce(&spread, 1, dist::ReduceOp::Sum);
  const double values = samples * static_cast<double>(k);
  r.mse = values > 0 ? weighted[static_cast<size_t>(k)] / values : std::nan("");
  r.mae = values > 0 ? weighted[static_cast<size_t>(k) + 1] / values : std::nan("");
  r.r2 = spread > 0 ? 1.0 - weighted[static_cast<size_t>(k)] / spread : std::nan("");
}

}  // namespace kdp::train::detail
