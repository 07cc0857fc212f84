#pragma once
// How an allreduce travels. The transport (../backend.hpp) carries bytes; the
// routes below are kdp's, and plan() is the one place that picks among them
// for a reduction, from what the caller asked for (a CommHook's
// AllreduceRoute) and the shape of the job. The route's name goes with the
// collective into the watchdog's messages and the trace.

#include <cstddef>

#include "../backend.hpp"
#include "kdp/dist/communicator.hpp"

namespace kdp::dist::algorithms {

enum class Route {
  Local,         // one rank: nothing to send
  Mpi,           // MPI's own allreduce (its shared-memory algorithms on one node)
  Ring,          // kdp's ring over point-to-point messages
  Hierarchical,  // inside each node, the ring among the nodes' leaders, inside again
};

struct Plan {
  Route route = Route::Mpi;
  bool bfloat16 = false;  // the ring's messages carry bfloat16
};

/// The route of an allreduce of `type` elements over `transport`'s world:
/// kdp's own routes carry floats only. A single rank sends nothing. Across
/// nodes floats take the ring (MPI's non-blocking allreduce would keep a core
/// polling; the ring's waits pause) unless asked for the hierarchical route;
/// on one node float32 takes MPI's shared-memory allreduce; bfloat16 messages
/// always take kdp's ring.
Plan plan(const detail::Backend& transport, detail::Element type, const AllreduceRoute& asked);

/// "local", "mpi", "ring", "ring-bf16", "hierarchical", "hierarchical-bf16".
const char* name(const Plan& plan);

/// Runs `plan` on `count` elements at `data`, in place (Average as Sum: the
/// caller scales). `residual` is the bfloat16 error feedback
/// (AllreduceRoute::residual) or null.
void run(const Plan& plan, detail::Backend& transport, void* data, size_t count,
         detail::Element type, ReduceOp op, float* residual);

/// The ring allreduce of `count` floats over `group` (bandwidth-optimal: each
/// rank sends 2 (p - 1) / p of the data), with bfloat16 messages if `bf16`.
/// Ranks outside the group (Leaders) do nothing.
void ring(detail::Backend& transport, detail::Group group, float* x, size_t count, ReduceOp op,
          bool bf16, float* residual);

/// The ring's first half on doubles, in place: afterwards the part of `x`
/// it returns holds the sum over `group`'s ranks, every rank's part a
/// different one, together all `count` elements (the rest holds partial sums).
/// Each rank sends (p - 1) / p of the data.
Part reduce_scatter(detail::Backend& transport, detail::Group group, double* x, size_t count);

/// The part of `count` elements reduce_scatter leaves complete at rank `rank`
/// of `ranks`.
Part ring_part(int ranks, int rank, size_t count);

/// The ring's second half on floats: every rank's part of `x` (as
/// reduce_scatter of `count` elements over `group` gave it) to every rank.
void allgather_parts(detail::Backend& transport, detail::Group group, float* x, size_t count);

/// Reduce inside the node, the ring among the leaders, broadcast inside the
/// node: only leaders use the network.
void hierarchical(detail::Backend& transport, float* x, size_t count, ReduceOp op, bool bf16,
                  float* residual);

/// into[i] = into[i] (op) from[i].
void combine(float* into, const float* from, size_t n, ReduceOp op);

}  // namespace kdp::dist::algorithms
