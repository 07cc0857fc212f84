#pragma once
/// \file
/// Communication hooks: what DistributedDataParallel does with a bucket whose
/// gradients are final (PyTorch's DistributedDataParallel.register_comm_hook).
/// A hook starts the reduction that leaves the bucket holding the average
/// gradient, the same on every rank; the optimizer then steps on it as usual.
///
///   allreduce_hook()       the average in float32 (the default)
///   bf16_compress_hook()   messages in bfloat16, half the bytes, with error
///                          feedback: what rounding took from a rank's
///                          gradient is kept and added to its next one, so
///                          nothing is lost over the steps; weights and the
///                          optimizer stay float32
///   hierarchical_hook()    reduce inside each node over shared memory, ring
///                          among one leader per node, broadcast inside the
///                          node: one rank per node uses the network
///
/// Each works over plain MPI on CPUs and GPUs alike (kdp's ring carries the
/// bfloat16 messages; no custom MPI operation is needed). A hook states what
/// it wants (an AllreduceRoute); the routes themselves (MPI's allreduce, the
/// ring, the hierarchical route, bfloat16 messages) are kdp's collective
/// algorithms over the MPI transport, and Request::route() and the trace name
/// the one each bucket took.

#include <map>
#include <memory>
#include <string>

#include "kdp/core/tensor.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/dist/gradient_bucket.hpp"

namespace kdp::dist {

/// Starts a bucket's reduction.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// "allreduce", "bf16", "hierarchical", "hierarchical-bf16".
  virtual std::string name() const = 0;
  /// Starts averaging `bucket.buffer()` over `comm`'s ranks; the request
  /// completes once the average is in the buffer. Called on every rank in
  /// the same bucket order.
  virtual Request launch(GradientBucket& bucket, Communicator& comm) = 0;
};

/// The float32 average (DDP's default).
std::shared_ptr<CommHook> allreduce_hook();
/// bfloat16 messages with error feedback (one residual per bucket).
std::shared_ptr<CommHook> bf16_compress_hook();
/// Node-aware reduction; with `bf16`, the leaders' ring carries bfloat16 (with
/// error feedback as bf16_compress_hook).
std::shared_ptr<CommHook> hierarchical_hook(bool bf16 = false);
/// The hook of a name above; a ValueError naming the choices otherwise.
std::shared_ptr<CommHook> comm_hook_named(const std::string& name);

}  // namespace kdp::dist
