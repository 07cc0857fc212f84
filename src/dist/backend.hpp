#pragma once
// A Communicator's transport: it carries bytes among one group of processes
// and does nothing else. MPI's (mpi_backend.cpp) in a build with MPI and a
// Runtime that started it, a single process's otherwise
// (single_process_backend.cpp); CMake builds the one its configuration needs.
// How a reduction travels (MPI's own allreduce, kdp's ring, the hierarchical
// route, bfloat16 messages) is not the transport's business but the
// algorithms' (dist/algorithms/), which it serves with point-to-point
// exchanges and the collectives of three groups. Calls come from one thread at
// a time (the communicator's queue orders them).

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kdp/dist/communicator.hpp"

namespace kdp::dist::detail {

/// The element types of reductions.
enum class Element { Float, Double, Int64 };

/// Bytes of one element.
inline size_t element_size(Element type) {
  return type == Element::Float ? sizeof(float) : 8;
}

/// The groups a transport serves: every process, those of this process's node
/// (shared memory), and one leader per node (the node's first process; others
/// are not members of it).
enum class Group { World, Node, Leaders };

class Backend {
 public:
  virtual ~Backend() = default;
  /// This process's rank and the group's size; in Leaders, -1 and 0 for a
  /// process that leads no node.
  virtual int rank(Group group = Group::World) const = 0;
  virtual int size(Group group = Group::World) const = 0;
  /// Nodes in the world.
  virtual int nodes() const { return size(); }
  /// Whether rank `r` of `group` runs on this process's node.
  virtual bool on_my_node(Group group, int r) const = 0;

  /// MPI's own in-place allreduce over the world (Average is reduced as Sum:
  /// the caller scales).
  virtual void allreduce(void* data, size_t count, Element type, ReduceOp op) = 0;
  /// In place onto rank 0 of `group` (others' data is left as it was).
  virtual void reduce(void* data, size_t count, Element type, ReduceOp op, Group group) = 0;
  virtual void broadcast(void* data, size_t bytes, int root, Group group = Group::World) = 0;
  /// Every rank's `bytes` into `all`, at `displacements`, `counts` long.
  virtual void allgatherv(const void* data, size_t bytes, void* all, const std::vector<int>& counts,
                          const std::vector<int>& displacements) = 0;
  /// The same onto `root` alone (`all` is only read there).
  virtual void gatherv(const void* data, size_t bytes, void* all, const std::vector<int>& counts,
                       const std::vector<int>& displacements, int root) = 0;
  virtual void barrier(Group group = Group::World) = 0;
  /// Sends `out` to rank `to` of `group` while receiving `in` from rank
  /// `from`; returns once both completed. `tag` tells the steps of one
  /// algorithm apart.
  virtual void sendrecv(const void* out, size_t out_bytes, int to, void* in, size_t in_bytes,
                        int from, int tag, Group group) = 0;

  /// Bytes this process has sent in reductions, by where they went: each
  /// point-to-point message and inside-node step as sent; MPI's own allreduce
  /// counted as a ring would send it (Traffic).
  virtual Traffic traffic() const { return {}; }
  /// Ends every process of the group with `message` on stderr.
  [[noreturn]] virtual void abort(const std::string& message, int code) = 0;
};

/// The backend over every process of the job: a duplicate of MPI_COMM_WORLD,
/// or this process alone.
std::unique_ptr<Backend> world_backend();
/// This process alone.
std::unique_ptr<Backend> single_process_backend();

}  // namespace kdp::dist::detail
