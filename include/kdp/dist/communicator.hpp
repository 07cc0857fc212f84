#pragma once
/// \file
/// Communicator: collectives across processes over a duplicated MPI
/// communicator (never MPI_COMM_WORLD itself), on tensors and on raw host
/// buffers, blocking or non-blocking. Non-blocking collectives run, in the order
/// they were started, on a communication thread of the communicator that issues
/// MPI's own blocking collectives (its fastest algorithms), so they progress
/// while the caller computes; a blocking collective waits for those before it.
/// Every collective is watched by the collective watchdog. Tensor memory is
/// handed to MPI only after the instance that wrote it is fenced; device memory
/// goes through host buffers. A build without MPI gets a single-rank
/// communicator with the same API.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/dist/watchdog.hpp"

namespace kdp::dist {

enum class ReduceOp { Sum, Average, Max, Min };

/// What a caller (a CommHook) asks of an allreduce of floats. The route it
/// takes is decided in one place from this and the job's shape
/// (src/dist/algorithms/route.cpp) and named by Request::route(): across
/// nodes kdp's ring over MPI's point-to-point messages (each rank sends
/// 2 (p - 1) / p of the data), inside one node MPI's own allreduce, bfloat16
/// messages always kdp's ring.
struct AllreduceRoute {
  /// Messages carry bfloat16 (half the bytes, 8 significant bits); every rank
  /// ends with the same values (a sum: each a bfloat16 value).
  bool bfloat16 = false;
  /// Reduce inside each node first (shared memory), run the ring among one
  /// leader per node, then broadcast inside each node: only leaders use the
  /// network. The same as the plain ring with one rank per node.
  bool hierarchical = false;
  /// Error feedback for bfloat16 (host memory of the data's length, kept by
  /// the caller until the reduction completes): added to the data before it
  /// is sent, then set to what rounding took from the messages this rank sent
  /// and from the values it completed. The sum of the results over many calls
  /// then loses at most the last call's residual.
  float* residual = nullptr;
};

/// Bytes a rank has sent in reductions, by where they went (to a rank on
/// another node: the network; on its own node: shared memory): those of
/// kdp's ring and hierarchical reductions as sent, and for MPI's own
/// allreduce, which kdp uses when every rank shares one node, what a ring
/// would send (2 (p - 1) / p of the data; MPI's algorithms move at least
/// that).
struct Traffic {
  uint64_t between_nodes = 0;
  uint64_t within_node = 0;
};

/// Elements [begin, begin + length) of a buffer: the part of it that one rank
/// completes in Communicator::reduce_scatter.
struct Part {
  size_t begin = 0;
  size_t length = 0;
};

/// A non-blocking collective in flight. wait() returns once it completed (its
/// results are in place); a default Request is already complete.
class Request {
 public:
  Request() = default;
  /// Waits until the collective is complete; rethrows its error.
  void wait();
  /// Whether it completed; never blocks.
  bool done() const;
  /// When the transfer started and ended (steady clock); both the epoch's
  /// start until it completed.
  std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point> times()
      const;
  /// How an allreduce travelled: "mpi" (MPI's own allreduce), "ring",
  /// "ring-bf16", "hierarchical", "hierarchical-bf16", or "local" (one rank);
  /// empty for other collectives.
  const char* route() const;

  struct State;
  explicit Request(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

/// Collectives over a duplicated MPI communicator.
class Communicator {
 public:
  /// A duplicate of MPI_COMM_WORLD (every rank must call this together), or the
  /// single rank of a build or Runtime without MPI.
  static Communicator world();

  int rank() const;
  int size() const;
  void barrier();

  /// In-place collectives on tensors (all ranks pass tensors of one shape).
  void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  Request iallreduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  Request iallreduce(Tensor& t, ReduceOp op, const AllreduceRoute& route);
  void broadcast(Tensor& t, int root = 0);
  Request ibroadcast(Tensor& t, int root = 0);
  /// The tensors of all ranks concatenated along dimension 0, in rank order.
  Tensor allgather(const Tensor& t);

  /// Collectives on host buffers.
  void allreduce(float* data, size_t count, ReduceOp op = ReduceOp::Sum);
  void allreduce(double* data, size_t count, ReduceOp op = ReduceOp::Sum);
  void allreduce(int64_t* data, size_t count, ReduceOp op = ReduceOp::Sum);
  Request iallreduce(float* data, size_t count, ReduceOp op = ReduceOp::Sum);
  void broadcast(void* data, size_t bytes, int root = 0);
  /// Every rank's bytes (sizes may differ), in rank order.
  std::vector<std::vector<char>> allgather_bytes(const void* data, size_t bytes);
  /// The same on `root` alone; the other ranks get nothing (an empty list).
  std::vector<std::vector<char>> gather_bytes(const void* data, size_t bytes, int root = 0);

  /// A sum in two halves over kdp's ring of point-to-point messages.
  /// reduce_scatter adds every rank's `data` into this rank's part of it, in
  /// place, and returns the part (the ranks' parts tile the buffer; the rest
  /// is left holding partial sums); allgather_parts then gives every rank
  /// every rank's part of `data`, as reduce_scatter of `count` elements split
  /// it. Each rank sends (p - 1) / p of the doubles and of the floats: 12
  /// bytes per element where an allreduce of doubles sends 16, for sums made
  /// in doubles and used as floats (ExactGradient's).
  Part reduce_scatter(double* data, size_t count);
  void allgather_parts(float* data, size_t count);
  /// The part of `count` elements that reduce_scatter gives this rank (and
  /// allgather_parts takes from it), without communicating.
  Part part(size_t count) const;

  /// Processes on this rank's node (MPI_COMM_TYPE_SHARED), and nodes in all.
  int local_size() const;
  int nodes() const;
  /// Bytes this rank has sent in reductions so far (reduce_scatter and
  /// allgather_parts included).
  Traffic traffic() const;

  CollectiveWatchdog& watchdog();
  /// Ends every process of the job with `message` on stderr.
  [[noreturn]] void abort(const std::string& message, int code = 1);

  struct Impl;
  explicit Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

/// "sum", "average", "max", "min".
const char* to_string(ReduceOp op);

}  // namespace kdp::dist
