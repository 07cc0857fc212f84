#pragma once
// A Communicator's transport: the blocking collectives of one group of
// processes. MPI's (mpi_backend.cpp) in a build with MPI and a Runtime that
// started it, a single process's otherwise (single_process_backend.cpp); CMake
// builds the one its configuration needs. Collectives are called from one
// thread at a time (the communicator's queue orders them).

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kdp/dist/communicator.hpp"

namespace kdp::dist::detail {

/// The element types of reductions.
enum class Element { Float, Double, Int64 };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In place; Average is reduced as Sum (the caller scales). `route` applies
  /// to Float (other types take MPI's own algorithms).
  virtual void allreduce(void* data, size_t count, Element type, ReduceOp op,
                         const AllreduceRoute& route) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  /// Every rank's `bytes` into `all`, at `displacements`, `counts` long.
  virtual void allgatherv(const void* data, size_t bytes, void* all, const std::vector<int>& counts,
                          const std::vector<int>& displacements) = 0;
  virtual void barrier() = 0;
  /// Bytes this process has sent, by where they went.
  virtual Traffic traffic() const { return {}; }
  /// Processes on this process's node, and nodes in the group.
  virtual int local_size() const { return 1; }
  virtual int nodes() const { return size(); }
  /// Ends every process of the group with `message` on stderr.
  [[noreturn]] virtual void abort(const std::string& message, int code) = 0;
};

/// The backend over every process of the job: a duplicate of MPI_COMM_WORLD,
/// or this process alone.
std::unique_ptr<Backend> world_backend();
/// This process alone.
std::unique_ptr<Backend> single_process_backend();

}  // namespace kdp::dist::detail
