#pragma once
/// \file
/// Learning-rate schedulers (torch.optim.lr_scheduler's closed forms). Call
/// step() once per epoch (or per step, as the schedule is meant); the
/// optimizer's lr is set from the schedule each time.

#include <map>
#include <string>
#include <vector>

#include "kdp/optim/optimizer.hpp"

namespace kdp::optim {

/// The base of learning-rate schedules.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  /// Advances the schedule by one and sets the optimizer's lr.
  void step();
  /// How many times step() was called.
  int64_t last_epoch() const { return last_epoch_; }
  double base_lr() const { return base_lr_; }
  /// The lr the schedule gives after `epoch` steps.
  virtual double lr_at(int64_t epoch) const = 0;

  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 protected:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t last_epoch_ = 0;
};

/// lr = base * gamma ^ floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = base * gamma ^ (the number of milestones <= epoch), as PyTorch's
/// MultiStepLR; milestones must be increasing.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t epoch) const override;
  const std::vector<int64_t>& milestones() const { return milestones_; }

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// lr = eta_min + (base - eta_min) (1 + cos(pi epoch / t_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear warm-up (PyTorch's LinearLR): the factor goes from start_factor to
/// end_factor over total_iters steps, then stays.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t total_iters, double start_factor = 1.0 / 3.0,
               double end_factor = 1.0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t total_iters_;
  double start_factor_;
  double end_factor_;
};

/// PyTorch's name for LinearWarmup.
using LinearLR = LinearWarmup;

}  // namespace kdp::optim
