#pragma once
/// \file
/// ZeroRedundancyOptimizer (PyTorch's torch.distributed.optim name; ZeRO stage
/// 1): each rank keeps and updates the optimizer state of its share of the
/// parameters only, then broadcasts the parameters it updated, so every rank
/// ends the step with the same weights as a replicated optimizer gives (the
/// same averaged gradient, the same update: bit for bit) while holding about
/// 1/N of the state.
///
///   optim::Adam adam(model->named_parameters(), options);
///   dist::ZeroRedundancyOptimizer zero(adam, comm);   // before the first step
///   trainer.fit(ddp, loss, adam, loader);             // the optimizer as usual
///
/// The parameters, flat and one after another, are cut into N equal slices:
/// rank r updates elements [r T / N, (r + 1) T / N) of the T, and its state
/// for a parameter is the flat length of its part of it. A checkpoint
/// holds the whole state in the usual format: the Trainer has every rank
/// write its own slice into the file rank 0 makes (io::SlicedCheckpoint,
/// with the layout Optimizer::state_layout() gathers), or gathers the state
/// onto rank 0 (Optimizer::gather_state) for rank 0 to write; loading a whole
/// state keeps each rank's share, so a checkpoint resumes sharded or not, at
/// any number of ranks.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kdp/dist/communicator.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::dist {

/// Shards an optimizer's state over the ranks of a communicator (see above).
class ZeroRedundancyOptimizer {
 public:
  /// Shards `optimizer` (which must not have stepped yet) over `comm`'s ranks
  /// until this object is destroyed; every rank calls it together.
  ZeroRedundancyOptimizer(optim::Optimizer& optimizer, Communicator comm);
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  /// The flat elements [begin, end) of parameter `name` this rank updates
  /// (empty: none).
  std::pair<int64_t, int64_t> range(const std::string& name) const;
  /// Elements of the parameters this rank updates, and of all of them.
  int64_t owned_elements() const;
  int64_t total_elements() const;
  /// Bytes of optimizer state this rank holds now.
  size_t state_bytes() const;

  struct Shared;

 private:
  optim::Optimizer& optimizer_;
  std::shared_ptr<Shared> shared_;
};

/// The bytes of a state (for gathering it across ranks) and back; the tensors
/// come back on the default device (loading places them on the parameters').
std::vector<char> serialize(const optim::OptimizerState& state);
optim::OptimizerState deserialize(const std::vector<char>& bytes);

}  // namespace kdp::dist
