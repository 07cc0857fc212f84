#pragma once
// An evaluation's sums for the regression metrics: the squared and absolute
// errors (on the device), and each target component's count, mean and spread
// (on the host, in double, batch by batch and then across ranks without
// cancellation), for R².

#include <cstdint>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/train/trainer.hpp"

namespace kdp::train::detail {

class RegressionSums {
 public:
  explicit RegressionSums(const Device& device);
  /// One batch: predictions and targets with the same number of values.
  void add(const Tensor& out, const Tensor& target);
  /// r.mse, r.mae and r.r2 over every rank's batches (every rank together).
  void finish(dist::Communicator& comm, EvalResult& r) const;

 private:
  Tensor squared_, absolute_;  // device scalars: sums of error^2 and |error|
  int64_t samples_ = 0, components_ = 0;
  std::vector<double> mean_, spread_;  // per component: mean and sum of squared deviations
};

}  // namespace kdp::train::detail
