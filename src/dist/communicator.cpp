#include "kdp/dist/communicator.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "kdp/config.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/runtime.hpp"

#if KDP_ENABLE_MPI
#include <mpi.h>
#endif

namespace kdp::dist {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Average:
      return "average";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

struct Communicator::Impl {
  int rank = 0;
  int size = 1;
  CollectiveWatchdog watchdog;
  std::mutex pending_mutex;
  std::vector<std::weak_ptr<Request::State>> pending;
#if KDP_ENABLE_MPI
  MPI_Comm comm = MPI_COMM_NULL;
  bool serialize = false;  // MPI gave less than MPI_THREAD_MULTIPLE
  std::recursive_mutex mpi_mutex;

  ~Impl() {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }
#endif

  void check(int code, const std::string& what) const {
#if KDP_ENABLE_MPI
    if (code != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(code, text, &len);
      throw CommError(fmt::format("kdp::dist: {} failed on rank {} of {}: {}", what, rank, size,
                                  std::string(text, static_cast<size_t>(len))));
    }
#else
    (void)code;
    (void)what;
#endif
  }

  [[noreturn]] void abort(const std::string& message, int code) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
#if KDP_ENABLE_MPI
    MPI_Abort(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
#endif
    std::_Exit(code);
  }
};

struct Request::State {
  std::mutex mutex;  // progress() and wait() may test from different threads
  std::string operation;
  std::shared_ptr<Communicator::Impl> comm;
  bool complete = false;
  std::function<void()> on_complete;  // copies staged data back, averages
#if KDP_ENABLE_MPI
  MPI_Request request = MPI_REQUEST_NULL;
#endif

  bool test() {
    std::lock_guard<std::mutex> guard(mutex);
    if (complete) return true;
#if KDP_ENABLE_MPI
    int flag = 0;
    {
      std::unique_lock<std::recursive_mutex> lock(comm->mpi_mutex, std::defer_lock);
      if (comm->serialize) lock.lock();
      comm->check(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), operation);
    }
    if (!flag) return false;
#endif
    complete = true;
    if (on_complete) on_complete();
    on_complete = nullptr;
    return true;
  }
};

namespace {

using State = Request::State;

#if KDP_ENABLE_MPI
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

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type<int64_t>() {
  return MPI_INT64_T;
}
#endif

// Starts a non-blocking operation: `start` issues the MPI call into the request.
template <class Start>
std::shared_ptr<State> launch(const std::shared_ptr<Communicator::Impl>& impl,
                              std::string operation, Start&& start,
                              std::function<void()> on_complete) {
  auto st = std::make_shared<State>();
  st->operation = std::move(operation);
  st->comm = impl;
  st->on_complete = std::move(on_complete);
#if KDP_ENABLE_MPI
  if (impl->size > 1) {
    std::unique_lock<std::recursive_mutex> lock(impl->mpi_mutex, std::defer_lock);
    if (impl->serialize) lock.lock();
    impl->check(start(&st->request), st->operation);
    std::lock_guard<std::mutex> plock(impl->pending_mutex);
    impl->pending.push_back(st);
    return st;
  }
#endif
  (void)start;
  st->test();  // one rank: nothing to exchange
  return st;
}

template <class T>
void scale_host(T* data, size_t count, double factor) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] * factor);
}

// Host memory MPI can read for tensor `t`: its own memory (after fencing the
// instance that wrote it) when the host can address it, else a staging copy.
struct HostView {
  float* data = nullptr;
  std::shared_ptr<std::vector<float>> staged;
};

HostView host_view(const Tensor& t, const char* why) {
  t.device().fence(why);
  HostView v;
  if constexpr (compat::launches_are_synchronous()) {
    v.data = t.data();
  } else {
    v.staged = std::make_shared<std::vector<float>>(t.to_vector());
    v.data = v.staged->data();
  }
  return v;
}

// Writes a staged buffer back into the tensor's memory.
void copy_back(const Tensor& t, const HostView& v) {
  if (!v.staged) return;
  Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> src(
      v.staged->data(), v.staged->size());
  Kokkos::deep_copy(t.flat(), src);
}

}  // namespace

// ---- Request -------------------------------------------------------------------

bool Request::done() const {
  return !state_ || state_->complete;
}

bool Request::test() {
  return !state_ || state_->test();
}

void Request::wait() {
  if (!state_ || state_->complete) return;
  auto& impl = *state_->comm;
  impl.watchdog.wait(
      state_->operation, impl.rank, impl.size, [this] { return state_->test(); },
      [&impl](const std::string& msg) { impl.abort(msg, 3); });
}

// ---- Communicator ----------------------------------------------------------------

Communicator Communicator::world() {
  auto impl = std::make_shared<Impl>();
#if KDP_ENABLE_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    impl->check(MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(impl->comm, &impl->rank);
    MPI_Comm_size(impl->comm, &impl->size);
    int level = 0;
    MPI_Query_thread(&level);
    impl->serialize = level < MPI_THREAD_MULTIPLE;
  }
#endif
  return Communicator(impl);
}

int Communicator::rank() const {
  return impl_->rank;
}
int Communicator::size() const {
  return impl_->size;
}
CollectiveWatchdog& Communicator::watchdog() {
  return impl_->watchdog;
}
void Communicator::abort(const std::string& message, int code) {
  impl_->abort(message, code);
}

void Communicator::barrier() {
  Request(launch(
              impl_, "barrier",
              [&](auto* req) {
#if KDP_ENABLE_MPI
                return MPI_Ibarrier(impl_->comm, req);
#else
                (void)req;
                return 0;
#endif
              },
              nullptr))
      .wait();
}

namespace {

template <class T>
std::shared_ptr<State> start_allreduce(const std::shared_ptr<Communicator::Impl>& impl, T* data,
                                       size_t count, ReduceOp op, std::function<void()> after,
                                       const std::string& what) {
  const double factor = op == ReduceOp::Average ? 1.0 / impl->size : 1.0;
  return launch(
      impl, fmt::format("allreduce ({}, {} elements{})", to_string(op), count, what),
      [&](auto* req) {
#if KDP_ENABLE_MPI
        return MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type<T>(),
                              mpi_op(op), impl->comm, req);
#else
        (void)req;
        return 0;
#endif
      },
      [data, count, factor, after = std::move(after)] {
        if (factor != 1.0) scale_host(data, count, factor);
        if (after) after();
      });
}

}  // namespace

Request Communicator::iallreduce(Tensor& t, ReduceOp op) {
  HostView v = host_view(t, "kdp::dist::allreduce");
  Tensor target = t;
  const std::string what = t.name().empty() ? "" : ", " + t.name();
  auto st = start_allreduce(
      impl_, v.data, static_cast<size_t>(t.numel()), op, [target, v] { copy_back(target, v); },
      what);
  t.impl()->storage->bump_version();
  return Request(st);
}

void Communicator::allreduce(Tensor& t, ReduceOp op) {
  iallreduce(t, op).wait();
}

Request Communicator::iallreduce(float* data, size_t count, ReduceOp op) {
  return Request(start_allreduce(impl_, data, count, op, nullptr, ""));
}

void Communicator::allreduce(float* data, size_t count, ReduceOp op) {
  Request(start_allreduce(impl_, data, count, op, nullptr, "")).wait();
}

void Communicator::allreduce(double* data, size_t count, ReduceOp op) {
  Request(start_allreduce(impl_, data, count, op, nullptr, "")).wait();
}

void Communicator::allreduce(int64_t* data, size_t count, ReduceOp op) {
  Request(start_allreduce(impl_, data, count, op, nullptr, "")).wait();
}

Request Communicator::ibroadcast(Tensor& t, int root) {
  if (root < 0 || root >= impl_->size) {
    throw ValueError(
        fmt::format("kdp::dist::broadcast: root {} is not a rank of {}", root, impl_->size));
  }
  HostView v = host_view(t, "kdp::dist::broadcast");
  Tensor target = t;
  float* data = v.data;
  const auto count = static_cast<int>(t.numel());
  auto st = launch(
      impl_,
      fmt::format("broadcast from rank {} ({} elements{})", root, count,
                  t.name().empty() ? "" : ", " + t.name()),
      [&](auto* req) {
#if KDP_ENABLE_MPI
        return MPI_Ibcast(data, count, MPI_FLOAT, root, impl_->comm, req);
#else
        (void)req;
        (void)data;
        return 0;
#endif
      },
      [target, v] { copy_back(target, v); });
  t.impl()->storage->bump_version();
  return Request(st);
}

void Communicator::broadcast(Tensor& t, int root) {
  ibroadcast(t, root).wait();
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= impl_->size) {
    throw ValueError(
        fmt::format("kdp::dist::broadcast: root {} is not a rank of {}", root, impl_->size));
  }
  Request(launch(
              impl_, fmt::format("broadcast from rank {} ({} bytes)", root, bytes),
              [&](auto* req) {
#if KDP_ENABLE_MPI
                return MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, impl_->comm, req);
#else
                (void)req;
                (void)data;
                return 0;
#endif
              },
              nullptr))
      .wait();
}

std::vector<std::vector<char>> Communicator::allgather_bytes(const void* data, size_t bytes) {
  const auto n = static_cast<size_t>(impl_->size);
  if (n == 1) {
    const auto* p = static_cast<const char*>(data);
    return {std::vector<char>(p, p + bytes)};
  }
  std::vector<int64_t> sizes(n, 0);
  sizes[static_cast<size_t>(impl_->rank)] = static_cast<int64_t>(bytes);
  allreduce(sizes.data(), n, ReduceOp::Sum);  // each rank contributed its own slot
  std::vector<int> counts(n), displs(n);
  int total = 0;
  for (size_t r = 0; r < n; ++r) {
    counts[r] = static_cast<int>(sizes[r]);
    displs[r] = total;
    total += counts[r];
  }
  std::vector<char> all(static_cast<size_t>(total));
  Request(launch(
              impl_, fmt::format("allgather ({} bytes)", bytes),
              [&](auto* req) {
#if KDP_ENABLE_MPI
                return MPI_Iallgatherv(data, static_cast<int>(bytes), MPI_BYTE, all.data(),
                                       counts.data(), displs.data(), MPI_BYTE, impl_->comm, req);
#else
                (void)req;
                return 0;
#endif
              },
              nullptr))
      .wait();
  std::vector<std::vector<char>> out(n);
  for (size_t r = 0; r < n; ++r) {
    out[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
  }
  return out;
}

Tensor Communicator::allgather(const Tensor& t) {
  if (t.dim() == 0) throw ShapeError("kdp::dist::allgather: give the tensor a first dimension");
  const std::vector<float> mine = t.to_vector();
  const auto parts = allgather_bytes(mine.data(), mine.size() * sizeof(float));
  std::vector<float> all;
  for (size_t r = 0; r < parts.size(); ++r) {
    if (parts[r].size() != mine.size() * sizeof(float)) {
      throw ShapeError(
          fmt::format("kdp::dist::allgather: rank {} sent {} elements but rank {} has {} ({})", r,
                      parts[r].size() / sizeof(float), impl_->rank, mine.size(), t.shape().str()));
    }
    const auto* f = reinterpret_cast<const float*>(parts[r].data());
    all.insert(all.end(), f, f + mine.size());
  }
  return Tensor::from_host(all, t.shape().with(0, t.size(0) * impl_->size), t.device());
}

void Communicator::progress() {
  std::vector<std::shared_ptr<State>> live;
  {
    std::lock_guard<std::mutex> lock(impl_->pending_mutex);
    for (auto& w : impl_->pending) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
    impl_->pending.clear();
  }
  std::vector<std::weak_ptr<State>> still;
  for (auto& s : live) {
    if (!s->test()) still.push_back(s);
  }
  std::lock_guard<std::mutex> lock(impl_->pending_mutex);
  impl_->pending.insert(impl_->pending.end(), still.begin(), still.end());
}

}  // namespace kdp::dist
