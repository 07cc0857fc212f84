#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// Every element type is 4 or 8 bytes.
uint64_t element_size(Element type) {
  return type == Element::Float ? 4 : 8;
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

// bfloat16 is float's upper half: round to nearest even, NaN kept a NaN.
uint16_t to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

void combine(float* into, const float* from, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average:
      for (size_t i = 0; i < n; ++i) into[i] += from[i];
      return;
    case ReduceOp::Max:
      for (size_t i = 0; i < n; ++i) into[i] = std::max(into[i], from[i]);
      return;
    case ReduceOp::Min:
      for (size_t i = 0; i < n; ++i) into[i] = std::min(into[i], from[i]);
      return;
  }
}

// Processes of one MPI communicator: a duplicate of MPI_COMM_WORLD whose errors
// come back as codes (and then as CommErrors naming the collective and the
// rank), the communicator of this node's processes and that of one leader per
// node. Across nodes every collective is MPI's non-blocking one or kdp's ring
// over point-to-point messages (floats), waited for by testing with short
// sleeps in between: a rank waiting for the network leaves its core to the
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
    KDP_CHECK(!(level < MPI_THREAD_MULTIPLE && size_ > 1), CommError, "kdp::dist::Communicator",
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
    if (leaders_ != MPI_COMM_NULL) MPI_Comm_set_errhandler(leaders_, MPI_ERRORS_RETURN);
    // Each rank's node: the world rank of its node's leader.
    int leader = rank_;
    check(MPI_Bcast(&leader, 1, MPI_INT, 0, local_), "MPI_Bcast");
    node_of_.resize(static_cast<size_t>(size_));
    check(MPI_Allgather(&leader, 1, MPI_INT, node_of_.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    nodes_ = static_cast<int>(std::set<int>(node_of_.begin(), node_of_.end()).size());
  }
  ~Mpi() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Comm* c : {&leaders_, &local_, &comm_}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int nodes() const override { return nodes_; }
  Traffic traffic() const override { return {between_nodes_.load(), within_node_.load()}; }

  void allreduce(void* data, size_t count, Element type, ReduceOp op,
                 const AllreduceRoute& route) override {
    // Floats across nodes, and bfloat16 messages anywhere: kdp's own routes.
    if (type == Element::Float && (route.bfloat16 || nodes_ > 1)) {
      routed(static_cast<float*>(data), count, op, route);
      return;
    }
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
  void broadcast(void* data, size_t bytes, int root) override {
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
  void barrier() override {
    collective([&](MPI_Request* req) { return MPI_Ibarrier(comm_, req); },
               [&] { return MPI_Barrier(comm_); }, "barrier");
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
    throw CommError("kdp::dist", fmt::format("{} failed on rank {} of {}: {}", what, rank_, size_,
                                             std::string(text, static_cast<size_t>(len))));
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

  // The ring over every rank; hierarchical: inside the node (shared memory),
  // the ring among the nodes' leaders, inside again (the plain ring where a
  // node holds one rank or all of them).
  void routed(float* x, size_t count, ReduceOp op, const AllreduceRoute& route) {
    if (!route.hierarchical || local_size_ == 1 || local_size_ == size_) {
      ring(comm_, x, count, op, route.bfloat16, route.residual);
      return;
    }
    check(MPI_Reduce(local_rank_ == 0 ? MPI_IN_PLACE : x, x, static_cast<int>(count), MPI_FLOAT,
                     mpi_op(op), 0, local_),
          "allreduce (inside the node)");
    if (local_rank_ != 0) within_node_ += count * sizeof(float);
    if (leaders_ != MPI_COMM_NULL) ring(leaders_, x, count, op, route.bfloat16, route.residual);
    // The others wait for their leader's network ring with pauses (polling
    // would take the cores that the leader's transfers and backward need),
    // then copy its result at memory speed.
    MPI_Request ready = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(local_, &ready), "allreduce (inside the node)");
    wait(&ready, 1, "allreduce (inside the node)");
    check(MPI_Bcast(x, static_cast<int>(count), MPI_FLOAT, 0, local_),
          "allreduce (inside the node)");
    if (local_rank_ == 0)
      within_node_ += count * sizeof(float) * static_cast<size_t>(local_size_ - 1);
  }

  // The ring allreduce of `count` floats over `comm` (bandwidth-optimal: each
  // rank sends 2 (p - 1) / p of the data): p - 1 steps of reduce-scatter, each
  // rank passing a partial result of one segment to its right neighbour, then
  // p - 1 steps of passing the completed segments on. With `bf16` every
  // message carries bfloat16 values (half the bytes); a segment is rounded to
  // bfloat16 once complete, so that every rank holds the same result, and
  // what each rounding took goes to `residual` (AllreduceRoute::residual).
  void ring(MPI_Comm comm, float* x, size_t count, ReduceOp op, bool bf16, float* residual) {
    int p = 1, r = 0;
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    if (p == 1) return;
    if (!bf16) residual = nullptr;
    if (residual != nullptr) {
      for (size_t i = 0; i < count; ++i) {
        x[i] += residual[i];
        residual[i] = 0.0f;
      }
    }
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    std::atomic<uint64_t>& sent = node_of_[static_cast<size_t>(world_rank(comm, right))] ==
                                          node_of_[static_cast<size_t>(rank_)]
                                      ? within_node_
                                      : between_nodes_;
    const auto begin = [&](int k) {
      return count * static_cast<size_t>(k) / static_cast<size_t>(p);
    };
    const auto length = [&](int k) { return begin(k + 1) - begin(k); };
    const size_t largest = length(p - 1) + 1;
    std::vector<float> in(largest);
    std::vector<uint16_t> out16(bf16 ? largest : 0), in16(bf16 ? largest : 0);

    // Segment `send` to the right, segment `recv` from the left into `in`;
    // with `keep_errors`, the rounding of what is sent goes to the residual.
    const auto exchange = [&](int send, int recv, int tag, bool keep_errors) {
      MPI_Request reqs[2];
      const size_t ns = length(send), nr = length(recv);
      const float* src = x + begin(send);
      if (bf16) {
        for (size_t i = 0; i < ns; ++i) out16[i] = to_bf16(src[i]);
        if (residual != nullptr && keep_errors) {
          float* res = residual + begin(send);
          for (size_t i = 0; i < ns; ++i) res[i] += src[i] - from_bf16(out16[i]);
        }
        check(MPI_Irecv(in16.data(), static_cast<int>(nr), MPI_UINT16_T, left, tag, comm, &reqs[0]),
              "allreduce");
        check(
            MPI_Isend(out16.data(), static_cast<int>(ns), MPI_UINT16_T, right, tag, comm, &reqs[1]),
            "allreduce");
      } else {
        check(MPI_Irecv(in.data(), static_cast<int>(nr), MPI_FLOAT, left, tag, comm, &reqs[0]),
              "allreduce");
        check(MPI_Isend(src, static_cast<int>(ns), MPI_FLOAT, right, tag, comm, &reqs[1]),
              "allreduce");
      }
      wait(reqs, 2, "allreduce");
      sent += ns * (bf16 ? sizeof(uint16_t) : sizeof(float));
      if (bf16) {
        for (size_t i = 0; i < nr; ++i) in[i] = from_bf16(in16[i]);
      }
    };
    for (int s = 0; s < p - 1; ++s) {
      const int send = (r - s + p) % p, recv = (r - s - 1 + p) % p;
      exchange(send, recv, s, true);
      combine(x + begin(recv), in.data(), length(recv), op);
    }
    // This rank's segment (r + 1) % p is complete.
    if (bf16) {
      const int mine = (r + 1) % p;
      float* own = x + begin(mine);
      for (size_t i = 0; i < length(mine); ++i) {
        const float rounded = from_bf16(to_bf16(own[i]));
        if (residual != nullptr) residual[begin(mine) + i] += own[i] - rounded;
        own[i] = rounded;
      }
    }
    for (int s = 0; s < p - 1; ++s) {
      const int send = (r + 1 - s + p) % p, recv = (r - s + p) % p;
      exchange(send, recv, p + s, false);  // bfloat16 values already
      std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(length(recv)),
                x + begin(recv));
    }
  }

  // The rank in comm_ of rank `r` of `comm`.
  int world_rank(MPI_Comm comm, int r) const {
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(comm_, &world);
    int out = r;
    MPI_Group_translate_ranks(group, 1, &r, world, &out);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return out;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  MPI_Comm leaders_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int nodes_ = 1;
  std::vector<int> node_of_;
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
