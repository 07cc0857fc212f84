#pragma once
/// \file
/// BatchNorm1d, BatchNorm2d and BatchNorm3d with PyTorch's arguments (num_features,
/// eps = 1e-5, momentum = 0.1 or none for a cumulative average, affine,
/// track_running_stats), parameters weight (ones) and bias (zeros), buffers
/// running_mean (zeros), running_var (ones) and num_batches_tracked (a count,
/// written as int64 in checkpoints, as PyTorch stores it), and PyTorch's
/// semantics: in training the batch's statistics normalise and update the
/// running ones (unbiased variance); in evaluation the running ones normalise.
/// Without track_running_stats the batch's statistics are used in both modes
/// and there are no buffers.
///
/// Under DataParallel each replica updates its own copy of the buffers and
/// the module keeps the mean of the replicas' updates (see
/// docs/architecture.md); SyncBatchNorm (kdp/dist/sync_batch_norm.hpp)
/// normalises with the statistics of the whole batch across devices and ranks.

#include <memory>
#include <optional>
#include <utility>

#include "kdp/nn/module.hpp"

namespace kdp::nn {

/// The options of a batch normalisation layer (PyTorch's defaults).
struct BatchNormOptions {
  double eps = 1e-5;
  /// The weight of the new statistics in the running ones; none: a
  /// cumulative average (1 / num_batches_tracked).
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;

  /// Chained setters, one per option, to name each where it is set:
  /// BatchNormOptions{}.with_eps(...).with_track_running_stats(...).
  BatchNormOptions& with_eps(double value) {
    eps = value;
    return *this;
  }
  BatchNormOptions& with_momentum(std::optional<double> value) {
    momentum = std::move(value);
    return *this;
  }
  BatchNormOptions& with_affine(bool value) {
    affine = value;
    return *this;
  }
  BatchNormOptions& with_track_running_stats(bool value) {
    track_running_stats = value;
    return *this;
  }
};

class BatchNorm;

/// What makes a BatchNorm synchronised (dist::SyncBatchNorm): the forward of
/// the layer whenever the batch's statistics normalise, computed from the
/// whole batch across replicas and ranks.
class BatchNormSynchronizer {
 public:
  virtual ~BatchNormSynchronizer() = default;
  /// The output of `layer` on `input` (this replica's part of the batch);
  /// `momentum` is this step's weight of the new running statistics (0 when
  /// they are not updated).
  virtual Tensor forward(const BatchNorm& layer, const Tensor& input, double momentum) = 0;
  /// From now on, makes its sums over replicas and ranks exact, the same bits
  /// however the parts are grouped, for at most `terms` parts in all over the
  /// ranks (0: plain sums again). Returns whether it can (reproducible mode
  /// refuses a synchronizer that cannot).
  virtual bool sum_exactly(int terms) {
    (void)terms;
    return false;
  }
};

/// What BatchNorm1d, BatchNorm2d and BatchNorm3d share (PyTorch's _BatchNorm).
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  using Module::forward;
  /// relu(forward(input)), in one pass each way where the layer normalises on
  /// its own (batch_norm_relu); a synchronised layer applies the ReLU after.
  Tensor forward_relu(const Tensor& input);
  std::string extra_repr() const override;
  bool synchronizes_replicas() const override { return synchronizer_ != nullptr; }

  /// From now on the batch's statistics come from `synchronizer` (null: this
  /// replica's part alone, as a plain BatchNorm).
  void synchronize(std::shared_ptr<BatchNormSynchronizer> synchronizer) {
    synchronizer_ = std::move(synchronizer);
  }
  const std::shared_ptr<BatchNormSynchronizer>& synchronizer() const { return synchronizer_; }
  int64_t num_features() const { return num_features_; }
  const BatchNormOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_tracked_; }
  /// Running statistics back to mean 0, variance 1, count 0.
  void reset_running_stats();

 protected:
  BatchNorm(std::string type_name, int64_t num_features, BatchNormOptions options,
            const Device& device);
  /// Throws ShapeError when `input` has a rank this layer does not take.
  virtual void check_input(const Tensor& input) const = 0;
  /// The new running statistics' weight for this step (reads the count when
  /// the momentum is none).
  double step_momentum(const Tensor& count) const;

 private:
  // forward() (relu false) and forward_relu().
  Tensor normalize(const Tensor& input, bool relu);

  int64_t num_features_;
  BatchNormOptions options_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
  std::shared_ptr<BatchNormSynchronizer> synchronizer_;
};

/// torch.nn.BatchNorm1d: input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {},
                       const Device& device = get_default_device());
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_input(const Tensor& input) const override;
};

/// torch.nn.BatchNorm2d: input [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {},
                       const Device& device = get_default_device());
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_input(const Tensor& input) const override;
};

/// torch.nn.BatchNorm3d: input [N, C, D, H, W].
class BatchNorm3d : public BatchNorm {
 public:
  explicit BatchNorm3d(int64_t num_features, BatchNormOptions options = {},
                       const Device& device = get_default_device());
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_input(const Tensor& input) const override;
};

}  // namespace kdp::nn
