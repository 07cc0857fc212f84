#include "kdp/nn/batch_norm.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "core/numbers.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/binding.hpp"
#include "kdp/core/error.hpp"
#include "kdp/ops/activation.hpp"
#include "kdp/ops/normalization.hpp"

namespace kdp::nn {

BatchNorm::BatchNorm(std::string type_name, int64_t num_features, BatchNormOptions options,
                     const Device& device)
    : Module(std::move(type_name)), num_features_(num_features), options_(options) {
  if (num_features < 1) {
    KDP_FAIL_FOR(KDP_ORIGIN_NAMED(Module::type_name()), ValueError, "num_features {} must be >= 1",
                 num_features);
  }
  if (!(options.eps > 0.0) || !std::isfinite(options.eps)) {
    KDP_FAIL_FOR(KDP_ORIGIN_NAMED(Module::type_name()), ValueError,
                 "eps {} must be a finite number > 0", options.eps);
  }
  if (options.momentum && !detail::is_finite_nonnegative(*options.momentum)) {
    KDP_FAIL_FOR(KDP_ORIGIN_NAMED(Module::type_name()), ValueError,
                 "momentum {} must be a finite number >= 0", *options.momentum);
  }
  if (options.affine) {
    weight_ = register_parameter(
        "weight", Tensor::empty_labeled({num_features}, device, "kdp::BatchNorm::weight"));
    bias_ = register_parameter(
        "bias", Tensor::empty_labeled({num_features}, device, "kdp::BatchNorm::bias"));
    NoGradGuard no_grad;
    weight_.fill_(1.0f);
    bias_.fill_(0.0f);
  }
  if (options.track_running_stats) {
    running_mean_ = register_buffer(
        "running_mean",
        Tensor::empty_labeled({num_features}, device, "kdp::BatchNorm::running_mean"));
    running_var_ = register_buffer(
        "running_var",
        Tensor::empty_labeled({num_features}, device, "kdp::BatchNorm::running_var"));
    num_batches_tracked_ = register_buffer(
        "num_batches_tracked",
        Tensor::empty_labeled(Shape{}, device, "kdp::BatchNorm::num_batches_tracked"));
    reset_running_stats();
  }
}

void BatchNorm::reset_running_stats() {
  if (!options_.track_running_stats) return;
  NoGradGuard no_grad;
  running_mean_.fill_(0.0f);
  running_var_.fill_(1.0f);
  num_batches_tracked_.fill_(0.0f);
}

double BatchNorm::step_momentum(const Tensor& count) const {
  if (options_.momentum) return *options_.momentum;
  return 1.0 / static_cast<double>(count.item());  // the count was just incremented: >= 1
}

Tensor BatchNorm::forward(const Tensor& input) {
  return normalize(input, false);
}

Tensor BatchNorm::forward_relu(const Tensor& input) {
  return normalize(input, true);
}

Tensor BatchNorm::normalize(const Tensor& input_in, bool relu) {
  const Tensor& input = resolve(input_in);
  check_input(input);
  const bool track = options_.track_running_stats;
  double momentum = 0.0;
  if (is_training() && track) {
    // Under DataParallel, the replica's own count (and statistics).
    Tensor count = resolve(num_batches_tracked_);
    NoGradGuard no_grad;
    count.add_(Tensor::scalar(1.0f, count.device()));
    momentum = step_momentum(count);
  }
  const bool batch_statistics = is_training() || !track;
  if (synchronizer_ && batch_statistics) {
    const Tensor y = synchronizer_->forward(*this, input, momentum);
    return relu ? kdp::relu(y) : y;
  }
  return (relu ? batch_norm_relu : batch_norm)(input, track ? running_mean_ : Tensor(),
                                               track ? running_var_ : Tensor(), weight_, bias_,
                                               batch_statistics, momentum, options_.eps);
}

std::string BatchNorm::extra_repr() const {
  return fmt::format(
      "{}, eps={}, momentum={}, affine={}, track_running_stats={}{}", num_features_, options_.eps,
      options_.momentum ? fmt::format("{}", *options_.momentum) : "None", options_.affine,
      options_.track_running_stats, synchronizer_ ? ", synchronized" : "");
}

BatchNorm1d::BatchNorm1d(int64_t num_features, BatchNormOptions options, const Device& device)
    : BatchNorm("BatchNorm1d", num_features, options, device) {}

void BatchNorm1d::check_input(const Tensor& input) const {
  KDP_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError,
            "expected [N, C] or [N, C, L] input, got {}", input.shape().str());
}

std::shared_ptr<Module> BatchNorm1d::clone() const {
  auto copy = std::make_shared<BatchNorm1d>(num_features(), options(), device());
  copy_state_into(*copy);
  copy->synchronize(synchronizer());
  copy->train(is_training());
  return copy;
}

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNormOptions options, const Device& device)
    : BatchNorm("BatchNorm2d", num_features, options, device) {}

void BatchNorm2d::check_input(const Tensor& input) const {
  KDP_CHECK(input.dim() == 4, ShapeError, "expected [N, C, H, W] input, got {}",
            input.shape().str());
}

std::shared_ptr<Module> BatchNorm2d::clone() const {
  auto copy = std::make_shared<BatchNorm2d>(num_features(), options(), device());
  copy_state_into(*copy);
  copy->synchronize(synchronizer());
  copy->train(is_training());
  return copy;
}

BatchNorm3d::BatchNorm3d(int64_t num_features, BatchNormOptions options, const Device& device)
    : BatchNorm("BatchNorm3d", num_features, options, device) {}

void BatchNorm3d::check_input(const Tensor& input) const {
  KDP_CHECK(input.dim() == 5, ShapeError, "expected [N, C, D, H, W] input, got {}",
            input.shape().str());
}

std::shared_ptr<Module> BatchNorm3d::clone() const {
  auto copy = std::make_shared<BatchNorm3d>(num_features(), options(), device());
  copy_state_into(*copy);
  copy->synchronize(synchronizer());
  copy->train(is_training());
  return copy;
}

}  // namespace kdp::nn
