#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

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

// A duplicate of MPI_COMM_WORLD whose errors come back as codes (and then as
// CommErrors naming the collective and the rank).
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
  }
  ~Mpi() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(void* data, size_t count, Element type, ReduceOp op) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type(type), mpi_op(op),
                        comm_),
          "allreduce");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_), "broadcast");
  }
  void allgatherv(const void* data, size_t bytes, void* all, const std::vector<int>& counts,
                  const std::vector<int>& displacements) override {
    check(MPI_Allgatherv(data, static_cast<int>(bytes), MPI_BYTE, all, counts.data(),
                         displacements.data(), MPI_BYTE, comm_),
          "allgather");
  }
  void barrier() override { check(MPI_Barrier(comm_), "barrier"); }
  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
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

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
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
