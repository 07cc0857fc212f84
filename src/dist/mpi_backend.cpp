#include <fmt/format.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::dist::detail {

namespace {

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average:
      return MPI_SUM;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

MPI_Datatype mpi_type(Element type) {
  switch (type) {
    case Element::Float:
      return MPI_FLOAT;
    case Element::Double:
      return MPI_DOUBLE;
    case Element::Int64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

// Processes of one MPI communicator: a duplicate of MPI_COMM_WORLD whose errors
// come back as codes (and then as CommErrors naming the collective and the
// rank), the communicator of this node's processes and that of one leader per
// node. Across nodes every collective is MPI's non-blocking one, and every
// point-to-point exchange a pair of non-blocking messages, waited for by
// testing with short sleeps in between: a rank waiting for the network leaves its core to the
// threads computing (MPI's blocking calls poll without a pause), and the
// messages still move while nobody tests (the kernel's socket buffers carry
// them). Inside one node MPI's blocking collectives run as they are.
class Mpi : public Backend {
 public:
  Mpi() {
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int level = 0;
    MPI_Query_thread(&level);
    KDP_CHECK(level >= MPI_THREAD_MULTIPLE || size_ <= 1, CommError,
              "MPI provides thread level {} but kdp communicates from a thread of its own and "
              "needs MPI_THREAD_MULTIPLE",
              level);
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_),
          "MPI_Comm_split_type");
    MPI_Comm_set_errhandler(local_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(local_, &local_rank_);
    MPI_Comm_size(local_, &local_size_);
    check(MPI_Comm_split(comm_, local_rank_ == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders_),
          "MPI_Comm_split");
    if (leaders_ != MPI_COMM_NULL) {
      MPI_Comm_set_errhandler(leaders_, MPI_ERRORS_RETURN);
      MPI_Comm_rank(leaders_, &leader_rank_);
      MPI_Comm_size(leaders_, &leaders_size_);
    }
    // Each rank's node: the world rank of its node's leader.
    int leader = rank_;
    check(MPI_Bcast(&leader, 1, MPI_INT, 0, local_), "MPI_Bcast");
    node_of_.resize(static_cast<size_t>(size_));
    check(MPI_Allgather(&leader, 1, MPI_INT, node_of_.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    const std::set<int> leaders(node_of_.begin(), node_of_.end());
    nodes_ = static_cast<int>(leaders.size());
    leader_world_rank_.assign(leaders.begin(), leaders.end());  // the leaders' order: world rank
  }
  ~Mpi() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Comm* c : {&leaders_, &local_, &comm_}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }

  int rank(Group group) const override {
    return group == Group::World ? rank_ : group == Group::Node ? local_rank_ : leader_rank_;
  }
  int size(Group group) const override {
    return group == Group::World ? size_ : group == Group::Node ? local_size_ : leaders_size_;
  }
  int nodes() const override { return nodes_; }
  bool on_my_node(Group group, int r) const override {
    if (group == Group::Node) return true;
    const int world = group == Group::World ? r : leader_world_rank_[static_cast<size_t>(r)];
    return node_of_[static_cast<size_t>(world)] == node_of_[static_cast<size_t>(rank_)];
  }
  Traffic traffic() const override { return {between_nodes_.load(), within_node_.load()}; }

  void allreduce(void* data, size_t count, Element type, ReduceOp op) override {
    if (nodes_ == 1 && size_ > 1) {  // MPI's shared-memory algorithms: what a ring would send
      within_node_ += 2 * static_cast<uint64_t>(size_ - 1) * count * element_size(type) /
                      static_cast<uint64_t>(size_);
    }
    collective(
        [&](MPI_Request* req) {
          return MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(type),
                                mpi_op(op), comm_, req);
        },
        [&] {
          return MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(type),
                               mpi_op(op), comm_);
        },
        "allreduce");
  }
  // Inside the node a blocking call (shared memory: the CPU's work); the
  // Node group's traffic is all of it within the node.
  void reduce(void* data, size_t count, Element type, ReduceOp op, Group group) override {
    MPI_Comm c = of(group);
    if (c == MPI_COMM_NULL) return;
    const bool root = rank(group) == 0;
    if (!root) sent(group, 0) += count * element_size(type);
    check(MPI_Reduce(root ? MPI_IN_PLACE : data, data, static_cast<int>(count), mpi_type(type),
                     mpi_op(op), 0, c),
          "reduce");
  }
  void broadcast(void* data, size_t bytes, int root, Group group) override {
    if (group != Group::World) {  // the hierarchical route's last step
      MPI_Comm c = of(group);
      if (c == MPI_COMM_NULL) return;
      if (rank(group) == root) {
        (group == Group::Node ? within_node_ : between_nodes_) +=
            bytes * static_cast<size_t>(size(group) - 1);
      }
      check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, c), "broadcast");
      return;
    }
    collective(
        [&](MPI_Request* req) {
          return MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, req);
        },
        [&] { return MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_); },
        "broadcast");
  }
  void allgatherv(const void* data, size_t bytes, void* all, const std::vector<int>& counts,
                  const std::vector<int>& displacements) override {
    collective(
        [&](MPI_Request* req) {
          return MPI_Iallgatherv(data, static_cast<int>(bytes), MPI_BYTE, all, counts.data(),
                                 displacements.data(), MPI_BYTE, comm_, req);
        },
        [&] {
          return MPI_Allgatherv(data, static_cast<int>(bytes), MPI_BYTE, all, counts.data(),
                                displacements.data(), MPI_BYTE, comm_);
        },
        "allgather");
  }
  void gatherv(const void* data, size_t bytes, void* all, const std::vector<int>& counts,
               const std::vector<int>& displacements, int root) override {
    collective(
        [&](MPI_Request* req) {
          return MPI_Igatherv(data, static_cast<int>(bytes), MPI_BYTE, all, counts.data(),
                              displacements.data(), MPI_BYTE, root, comm_, req);
        },
        [&] {
          return MPI_Gatherv(data, static_cast<int>(bytes), MPI_BYTE, all, counts.data(),
                             displacements.data(), MPI_BYTE, root, comm_);
        },
        "gather");
  }
  // A barrier may wait for another node's work: with pauses wherever the job
  // spans nodes.
  void barrier(Group group) override {
    MPI_Comm c = of(group);
    if (c == MPI_COMM_NULL) return;
    collective([&](MPI_Request* req) { return MPI_Ibarrier(c, req); },
               [&] { return MPI_Barrier(c); }, "barrier");
  }
  void sendrecv(const void* out, size_t out_bytes, int to, void* in, size_t in_bytes, int from,
                int tag, Group group) override {
    MPI_Comm c = of(group);
    MPI_Request reqs[2];
    check(MPI_Irecv(in, static_cast<int>(in_bytes), MPI_BYTE, from, tag, c, &reqs[0]), "receive");
    check(MPI_Isend(out, static_cast<int>(out_bytes), MPI_BYTE, to, tag, c, &reqs[1]), "send");
    wait(reqs, 2, "send and receive");
    sent(group, to) += out_bytes;
  }
  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    // MPI_Abort asks the launcher to end every rank; a rank that cannot reach
    // it (its node lost its link) would wait there for ever: it ends itself
    // after a moment either way.
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      std::_Exit(code);
    }).detach();
    MPI_Abort(comm_ == MPI_COMM_NULL ? MPI_COMM_WORLD : comm_, code);
    std::_Exit(code);
  }

 private:
  void check(int code, const char* what) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    KDP_FAIL(CommError, "{} failed on rank {} of {}: {}", what, rank_, size_,
             std::string(text, static_cast<size_t>(len)));
  }

  // Tests `reqs` until all completed. Across nodes: a moment of testing (a
  // short message completes there), then a test every 50 microseconds; inside
  // one node, where moving the data is the CPU's work, without a pause.
  void wait(MPI_Request* reqs, int n, const char* what) const {
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    for (;;) {
      int done = 0;
      check(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), what);
      if (done) return;
      if (nodes_ > 1 && std::chrono::steady_clock::now() >= spin_until) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  // One of MPI's collectives: the blocking call where every rank shares this
  // node (moving data through shared memory is the CPU's work anyway, and
  // MPI's single-copy algorithms are the fastest there), else the
  // non-blocking one waited for with pauses, while the network moves it.
  template <class Start, class Blocking>
  void collective(const Start& start, const Blocking& blocking, const char* what) {
    if (nodes_ == 1) {
      check(blocking(), what);
      return;
    }
    MPI_Request req = MPI_REQUEST_NULL;
    check(start(&req), what);
    wait(&req, 1, what);
  }

  MPI_Comm of(Group group) const {
    return group == Group::World ? comm_ : group == Group::Node ? local_ : leaders_;
  }

  // The counter of bytes sent to rank `r` of `group`.
  std::atomic<uint64_t>& sent(Group group, int r) {
    return on_my_node(group, r) ? within_node_ : between_nodes_;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  MPI_Comm leaders_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int leader_rank_ = -1;
  int leaders_size_ = 0;
  int nodes_ = 1;
  std::vector<int> node_of_;            // each world rank's node: its leader's world rank
  std::vector<int> leader_world_rank_;  // each leader's world rank
  // Read by any thread (Communicator::traffic), written by the one reducing.
  std::atomic<uint64_t> between_nodes_{0};
  std::atomic<uint64_t> within_node_{0};
};

}  // namespace

// MPI's world when the Runtime started MPI, else this process alone.
std::unique_ptr<Backend> world_backend() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return single_process_backend();
  return std::make_unique<Mpi>();
}

}  // namespace kdp::dist::detail
