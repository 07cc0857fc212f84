#include "kdp/optim/lr_scheduler.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/check.hpp"
#include "core/numbers.hpp"
#include "kdp/core/error.hpp"

namespace kdp::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() {
  ++last_epoch_;
  optimizer_.set_lr(lr_at(last_epoch_));
}

std::map<std::string, double> LRScheduler::state_dict() const {
  return {{"last_epoch", static_cast<double>(last_epoch_)}, {"base_lr", base_lr_}};
}

void LRScheduler::load_state_dict(const std::map<std::string, double>& state) {
  auto e = state.find("last_epoch");
  auto b = state.find("base_lr");
  KDP_CHECK(e != state.end() && b != state.end(), ValueError, "needs last_epoch and base_lr");
  KDP_CHECK(kdp::detail::is_count(e->second), ValueError,
            "last_epoch = {} is not a whole number >= 0", e->second);
  KDP_CHECK(kdp::detail::is_finite_nonnegative(b->second), ValueError,
            "base_lr = {} is not a finite number >= 0", b->second);
  last_epoch_ = static_cast<int64_t>(e->second);
  base_lr_ = b->second;
  optimizer_.set_lr(lr_at(last_epoch_));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  KDP_CHECK(step_size >= 1, ValueError, "step_size {} < 1", step_size);
}

double StepLR::lr_at(int64_t epoch) const {
  return base_lr_ * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  for (size_t i = 0; i < milestones_.size(); ++i) {
    KDP_CHECK(milestones_[i] >= 1 && (i == 0 || milestones_[i] > milestones_[i - 1]), ValueError,
              "milestones [{}] must be increasing whole numbers >= 1",
              fmt::join(milestones_, ", "));
  }
  KDP_CHECK(std::isfinite(gamma) && gamma >= 0.0, ValueError, "gamma {} must be finite and >= 0",
            gamma);
}

double MultiStepLR::lr_at(int64_t epoch) const {
  int64_t passed = 0;
  for (int64_t m : milestones_) passed += m <= epoch ? 1 : 0;
  return base_lr_ * std::pow(gamma_, static_cast<double>(passed));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  KDP_CHECK(t_max >= 1, ValueError, "t_max {} < 1", t_max);
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double pi = 3.14159265358979323846;
  return eta_min_ +
         (base_lr_ - eta_min_) *
             (1.0 + std::cos(pi * static_cast<double>(epoch) / static_cast<double>(t_max_))) / 2.0;
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t total_iters, double start_factor,
                           double end_factor)
    : LRScheduler(optimizer),
      total_iters_(total_iters),
      start_factor_(start_factor),
      end_factor_(end_factor) {
  KDP_CHECK(total_iters >= 1 && start_factor > 0.0 && start_factor <= 1.0, ValueError,
            "needs total_iters >= 1 and 0 < start_factor <= 1, got {} and {}", total_iters,
            start_factor);
  optimizer_.set_lr(lr_at(0));
}

double LinearWarmup::lr_at(int64_t epoch) const {
  const double t =
      static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base_lr_ * (start_factor_ + (end_factor_ - start_factor_) * t);
}

}  // namespace kdp::optim
