#pragma once
/// \file
/// Optimizer: updates named parameters from their gradients. State (momentum
/// buffers, Adam moments, step counts) is kept per parameter name, so a
/// checkpoint stores it by the same keys as the model's state dict.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp::optim {

using NamedParameters = std::vector<std::pair<std::string, Tensor>>;

/// Everything an optimizer needs to continue exactly where it stopped.
struct OptimizerState {
  std::string type;                                              // "SGD", "Adam", "AdamW"
  std::map<std::string, double> hyperparameters;                 // lr, momentum, betas, ...
  std::map<std::string, std::map<std::string, Tensor>> tensors;  // param -> "exp_avg" -> t
  std::map<std::string, std::map<std::string, double>> scalars;  // param -> "step" -> n
};

/// Updates named parameters from their gradients.
class Optimizer {
 public:
  Optimizer(std::string type, NamedParameters params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient.
  void step();
  /// Drops (or zeroes) every parameter's gradient.
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr);
  const std::string& type() const { return type_; }
  const NamedParameters& parameters() const { return params_; }

  /// Runs before every step (DistributedDataParallel waits for its reductions
  /// here); returns an id for remove_pre_step_hook.
  uint64_t add_pre_step_hook(std::function<void()> hook);
  void remove_pre_step_hook(uint64_t id);

  /// Sharding (dist::ZeroRedundancyOptimizer sets it up): this optimizer
  /// updates, and keeps state for, only the elements `range` gives for each
  /// parameter ([begin, end) of its flat elements; empty: none), its state
  /// then the flat length of that range; after every step `after_step` runs
  /// (it brings the others' updates); gather_state() runs `gather`, whose
  /// result (where it gives one) state_dict() returns until the next step.
  /// Loading a whole state keeps the owned range of each entry.
  struct Sharding {
    std::function<std::pair<int64_t, int64_t>(const std::string&)> range;
    std::function<void()> after_step;
    std::function<std::optional<OptimizerState>(const OptimizerState& mine)> gather;
    /// As `gather`, for state_layout(): the layouts (no values) of every
    /// rank's state merged onto rank 0.
    std::function<std::optional<OptimizerState>(const OptimizerState& mine)> gather_layout;
  };
  void set_sharding(Sharding sharding);
  void clear_sharding();
  bool sharded() const { return static_cast<bool>(sharding_.range); }
  /// With sharding, on every rank together: the whole state on rank 0, for
  /// state_dict() (a checkpoint) to return there; the other ranks keep only
  /// their own share in memory. Without, nothing.
  void gather_state();

  /// The elements [begin, end) of parameter `name`'s flat elements whose
  /// state this optimizer keeps: all of them unless it is sharded.
  std::pair<int64_t, int64_t> owned_range(const std::string& name) const;
  /// The whole state without its values, every rank together when sharded:
  /// its type, hyperparameters and scalars, and each parameter's tensor keys
  /// with undefined tensors (each entry's shape is its parameter's). Sharded,
  /// rank 0 gets it and the other ranks get nothing. For a checkpoint whose
  /// values every rank writes itself (io::SlicedCheckpoint).
  std::optional<OptimizerState> state_layout() const;
  /// The state tensors this optimizer keeps (sharded: each the flat slice
  /// owned_range() gives), not copied.
  const std::map<std::string, std::map<std::string, Tensor>>& own_state_tensors() const {
    return tensor_state_;
  }

  /// A snapshot (copies) of the optimizer's state.
  OptimizerState state_dict() const;
  /// The state as state_dict() gives it, but its tensors the ones the
  /// optimizer updates, not copies: valid until the next step, for writing
  /// a checkpoint without copying every tensor first.
  OptimizerState state_view() const;
  /// Bytes of the tensors of state this optimizer keeps for its updates (a
  /// sharded one: its slices; not what gather_state() holds for a checkpoint).
  size_t state_bytes() const;
  /// Everything load_state_dict() would refuse in `state`, one message each
  /// (another type, unknown parameter names, other shapes, hyperparameters
  /// out of range, numbers that are not finite); empty when it would load.
  std::vector<std::string> state_problems(const OptimizerState& state) const;
  /// Restores a state from state_dict(); throws ValueError naming every
  /// problem state_problems() finds, and then changes nothing.
  void load_state_dict(const OptimizerState& state);
  /// load_state_dict() that keeps the state's tensors (on the parameters'
  /// device memory) instead of copying them: for a state made to be loaded,
  /// such as a checkpoint's.
  void adopt_state_dict(const OptimizerState& state);

 protected:
  /// Updates one parameter; `grad` is defined.
  virtual void update(const std::string& name, Tensor& param, const Tensor& grad) = 0;
  virtual std::map<std::string, double> hyperparameters() const = 0;
  virtual void set_hyperparameters(const std::map<std::string, double>& values) = 0;
  /// Why set_hyperparameters() would refuse `values` (an empty string when it
  /// would take them); it must not throw.
  virtual std::string hyperparameter_problem(const std::map<std::string, double>& values) const {
    (void)values;
    return {};
  }

  /// The message of the ValueError that `check` throws; empty when it
  /// throws none (for hyperparameter_problem()).
  static std::string refusal(const std::function<void()>& check);

  /// Per-parameter state, created on first use.
  std::map<std::string, std::map<std::string, Tensor>> tensor_state_;
  std::map<std::string, std::map<std::string, double>> scalar_state_;

 private:
  void load_state(const OptimizerState& state, bool adopt);
  /// What local_state() puts in the state's tensors.
  enum class StateTensors { Undefined, Shared, Copies };
  /// This rank's state.
  OptimizerState local_state(StateTensors tensors = StateTensors::Copies) const;

  std::string type_;
  NamedParameters params_;
  double lr_;
  std::vector<std::pair<uint64_t, std::function<void()>>> pre_step_hooks_;
  Sharding sharding_;
  std::optional<OptimizerState> gathered_;  // gather_state()'s, until the next step
  uint64_t next_hook_id_ = 1;
};

/// Names "0", "1", ... for plain parameter lists.
NamedParameters name_parameters(const std::vector<Tensor>& params);

}  // namespace kdp::optim
