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

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/dist/watchdog.hpp"

namespace kdp::dist {

enum class ReduceOp { Sum, Average, Max, Min };

/// A non-blocking collective in flight. wait() returns once it completed (its
/// results are in place); a default Request is already complete.
class Request {
 public:
  Request() = default;
  /// Waits until the collective is complete; rethrows its error.
  void wait();
  /// Whether it completed; never blocks.
  bool done() const;

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
