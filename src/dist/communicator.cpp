#include "kdp/dist/communicator.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "core/check.hpp"
#include "core/kernels.hpp"
#include "kdp/config.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/runtime.hpp"

#if KDP_ENABLE_MPI
#include <mpi.h>
#endif

namespace kdp::dist {

// A switch, as every enum's names in kdp: -Wswitch then names an enumerator
// added without its name, which a shared table could not.
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

namespace {
// What a collective is, for the watchdog's message (built only on a timeout).
struct OpInfo {
  const char* kind = "";    // "allreduce"
  const char* detail = "";  // "sum"
  size_t count = 0;         // elements or bytes
  const char* unit = "";
  const char* name = "";  // the tensor's name, if any (must outlive the collective)

  static std::string describe(const void* self) {
    const auto* op = static_cast<const OpInfo*>(self);
    std::string s = fmt::format("{} ({}{}{} {}", op->kind, op->detail, *op->detail ? ", " : "",
                                op->count, op->unit);
    if (*op->name) s += std::string(", ") + op->name;
    return s + ")";
  }
};
}  // namespace

struct Request::State {
  OpInfo info;
  std::string name;                   // info.name points here
  std::function<void()> run;          // the MPI call(s), blocking
  std::function<void()> on_complete;  // copies staged data back, averages
  std::mutex mutex;
  std::condition_variable cv;
  bool complete = false;
  std::exception_ptr error;
};

struct Communicator::Impl {
  int rank = 0;
  int size = 1;
  CollectiveWatchdog watchdog{[this](const std::string& msg) { abort(msg, 3); }};
#if KDP_ENABLE_MPI
  MPI_Comm comm = MPI_COMM_NULL;
#endif
  // The communication thread and the order of collectives.
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::shared_ptr<Request::State>> queue;
  bool busy = false;
  bool stop = false;
  std::thread worker;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      stop = true;
    }
    queue_cv.notify_all();
    if (worker.joinable()) worker.join();
#if KDP_ENABLE_MPI
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
#endif
  }

  void check(int code, const std::string& what) const {
#if KDP_ENABLE_MPI
    if (code != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(code, text, &len);
      throw CommError("kdp::dist", fmt::format("{} failed on rank {} of {}: {}", what, rank, size,
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

  // Runs one collective under the watchdog and marks it complete.
  void execute(Request::State& st) {
    if (size > 1) {
      const size_t token = watchdog.arm(&OpInfo::describe, &st.info, rank, size);
      try {
        st.run();
      } catch (...) {
        st.error = std::current_exception();
      }
      watchdog.disarm(token);
    }
    if (!st.error && st.on_complete) {
      try {
        st.on_complete();
      } catch (...) {
        st.error = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(st.mutex);
      st.complete = true;
    }
    st.cv.notify_all();
  }

  void work() {
    std::unique_lock<std::mutex> lock(queue_mutex);
    for (;;) {
      queue_cv.wait(lock, [&] { return (stop && queue.empty()) || (!queue.empty() && !busy); });
      if (queue.empty()) return;
      auto st = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      execute(*st);
      lock.lock();
      busy = false;
      queue_cv.notify_all();
    }
  }

  // Queues a collective for the communication thread.
  void submit(const std::shared_ptr<Request::State>& st) {
    if (size == 1) {
      execute(*st);  // nothing to exchange: complete at once
      return;
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      queue.push_back(st);
      if (!worker.joinable()) worker = std::thread([this] { work(); });
    }
    queue_cv.notify_all();
  }

  // Runs `call` (a blocking MPI collective) on the caller's thread, after every
  // queued collective, under the watchdog.
  template <class F>
  void run_now(const OpInfo& info, F&& call) {
    if (size == 1) return;
    {
      std::unique_lock<std::mutex> lock(queue_mutex);
      if (!queue.empty() || busy) queue_cv.wait(lock, [&] { return queue.empty() && !busy; });
      busy = true;
    }
    const size_t token = watchdog.arm(&OpInfo::describe, &info, rank, size);
    std::exception_ptr error;
    try {
      call();
    } catch (...) {
      error = std::current_exception();
    }
    watchdog.disarm(token);
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      busy = false;
    }
    queue_cv.notify_all();
    if (error) std::rethrow_exception(error);
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

std::shared_ptr<State> make_state(OpInfo info, const std::string& name, std::function<void()> run,
                                  std::function<void()> on_complete) {
  auto st = std::make_shared<State>();
  st->info = info;
  st->name = name;
  st->info.name = st->name.c_str();
  st->run = std::move(run);
  st->on_complete = std::move(on_complete);
  return st;
}

template <class T>
void scale_host(T* data, size_t count, double factor) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] * factor);
}

// Memory MPI can use for tensor `t`: its own (after fencing the instance that
// wrote it) when the host can address it or MPI is GPU-aware
// (KDP_ENABLE_GPU_AWARE_MPI), else a staging copy in host memory.
struct HostView {
  float* data = nullptr;
  std::shared_ptr<std::vector<float>> staged;
};

// Device memory handed straight to MPI cannot be scaled by the host after the
// reduction: there an average is the sum of values scaled on the device first.
ReduceOp scale_for_device_average(Tensor& t, ReduceOp op, int size) {
  if constexpr (!compat::host_accessible_memory() && KDP_ENABLE_GPU_AWARE_MPI) {
    if (op == ReduceOp::Average && size > 1) {
      kdp::detail::scale(t.device(), t.flat(), 1.0f / static_cast<float>(size));
      return ReduceOp::Sum;
    }
  }
  (void)t;
  (void)size;
  return op;
}

HostView host_view(const Tensor& t, const char* why) {
  t.device().fence(why);
  HostView v;
  if constexpr (compat::host_accessible_memory() || KDP_ENABLE_GPU_AWARE_MPI) {
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
  Runtime::get().count_transfer(/*to_host=*/false, v.staged->size() * sizeof(float));
}

template <class T>
std::shared_ptr<State> allreduce_state(Communicator::Impl& impl, T* data, size_t count, ReduceOp op,
                                       std::function<void()> after, const std::string& name) {
  const double factor = op == ReduceOp::Average ? 1.0 / impl.size : 1.0;
  Communicator::Impl* c = &impl;
  return make_state(
      OpInfo{"allreduce", to_string(op), count, "elements", ""}, name,
      [c, data, count, op] {
#if KDP_ENABLE_MPI
        c->check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type<T>(),
                               mpi_op(op), c->comm),
                 "allreduce");
#else
        (void)c;
        (void)data;
        (void)count;
        (void)op;
#endif
      },
      [data, count, factor, after = std::move(after)] {
        if (factor != 1.0) scale_host(data, count, factor);
        if (after) after();
      });
}

}  // namespace

// ---- Request -------------------------------------------------------------------

bool Request::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->complete;
}

void Request::wait() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->complete; });
  if (state_->error) std::rethrow_exception(state_->error);
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
    KDP_CHECK(!(level < MPI_THREAD_MULTIPLE && impl->size > 1), CommError,
              "kdp::dist::Communicator",
              "MPI provides thread level {} but kdp communicates from a "
              "thread of its own and needs MPI_THREAD_MULTIPLE",
              level);
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
  Impl* c = impl_.get();
  impl_->run_now(OpInfo{"barrier", "", 0, "bytes", ""}, [c] {
#if KDP_ENABLE_MPI
    c->check(MPI_Barrier(c->comm), "barrier");
#else
    (void)c;
#endif
  });
}

namespace {
// A blocking allreduce of host memory on the caller's thread.
template <class T>
void allreduce_now(Communicator::Impl& impl, T* data, size_t count, ReduceOp op,
                   const std::string& name) {
  if (impl.size > 1) {
    impl.run_now(OpInfo{"allreduce", to_string(op), count, "elements", name.c_str()}, [&] {
#if KDP_ENABLE_MPI
      impl.check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpi_type<T>(),
                               mpi_op(op), impl.comm),
                 "allreduce");
#endif
    });
  }
  if (op == ReduceOp::Average && impl.size > 1) scale_host(data, count, 1.0 / impl.size);
}
}  // namespace

Request Communicator::iallreduce(Tensor& t, ReduceOp op) {
  op = scale_for_device_average(t, op, impl_->size);
  HostView v = host_view(t, "kdp::dist::allreduce");
  Tensor target = t;
  auto st = allreduce_state(
      *impl_, v.data, static_cast<size_t>(t.numel()), op, [target, v] { copy_back(target, v); },
      t.name());
  t.impl()->storage->bump_version();
  impl_->submit(st);
  return Request(st);
}

void Communicator::allreduce(Tensor& t, ReduceOp op) {
  op = scale_for_device_average(t, op, impl_->size);
  HostView v = host_view(t, "kdp::dist::allreduce");
  allreduce_now(*impl_, v.data, static_cast<size_t>(t.numel()), op, t.name());
  copy_back(t, v);
  t.impl()->storage->bump_version();
}

Request Communicator::iallreduce(float* data, size_t count, ReduceOp op) {
  auto st = allreduce_state(*impl_, data, count, op, nullptr, "");
  impl_->submit(st);
  return Request(st);
}

namespace {
const std::string kNoName;
}

void Communicator::allreduce(float* data, size_t count, ReduceOp op) {
  allreduce_now(*impl_, data, count, op, kNoName);
}

void Communicator::allreduce(double* data, size_t count, ReduceOp op) {
  allreduce_now(*impl_, data, count, op, kNoName);
}

void Communicator::allreduce(int64_t* data, size_t count, ReduceOp op) {
  allreduce_now(*impl_, data, count, op, kNoName);
}

namespace {
void check_root(const Communicator::Impl& impl, int root) {
  KDP_CHECK(!(root < 0 || root >= impl.size), ValueError, "kdp::dist::broadcast",
            "root {} is not a rank of {}", root, impl.size);
}

std::shared_ptr<State> broadcast_state(Communicator::Impl& impl, void* data, size_t bytes, int root,
                                       const std::string& name, std::function<void()> after) {
  check_root(impl, root);
  Communicator::Impl* c = &impl;
  return make_state(
      OpInfo{"broadcast", root == 0 ? "from rank 0" : "from another rank", bytes, "bytes", ""},
      name,
      [c, data, bytes, root] {
#if KDP_ENABLE_MPI
        c->check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, c->comm), "broadcast");
#else
        (void)c;
        (void)data;
        (void)bytes;
        (void)root;
#endif
      },
      std::move(after));
}
}  // namespace

Request Communicator::ibroadcast(Tensor& t, int root) {
  HostView v = host_view(t, "kdp::dist::broadcast");
  Tensor target = t;
  auto st = broadcast_state(*impl_, v.data, static_cast<size_t>(t.numel()) * sizeof(float), root,
                            t.name(), [target, v] { copy_back(target, v); });
  t.impl()->storage->bump_version();
  impl_->submit(st);
  return Request(st);
}

namespace {
void broadcast_now(Communicator::Impl& impl, void* data, size_t bytes, int root,
                   const std::string& name) {
  check_root(impl, root);
  impl.run_now(OpInfo{"broadcast", root == 0 ? "from rank 0" : "from another rank", bytes, "bytes",
                      name.c_str()},
               [&] {
#if KDP_ENABLE_MPI
                 impl.check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, impl.comm),
                            "broadcast");
#else
                 (void)data;
#endif
               });
}
}  // namespace

void Communicator::broadcast(Tensor& t, int root) {
  HostView v = host_view(t, "kdp::dist::broadcast");
  broadcast_now(*impl_, v.data, static_cast<size_t>(t.numel()) * sizeof(float), root, t.name());
  copy_back(t, v);
  t.impl()->storage->bump_version();
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  broadcast_now(*impl_, data, bytes, root, kNoName);
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
  impl_->run_now(OpInfo{"allgather", "", bytes, "bytes", ""}, [&] {
#if KDP_ENABLE_MPI
    impl_->check(MPI_Allgatherv(data, static_cast<int>(bytes), MPI_BYTE, all.data(), counts.data(),
                                displs.data(), MPI_BYTE, impl_->comm),
                 "allgather");
#endif
  });
  std::vector<std::vector<char>> out(n);
  for (size_t r = 0; r < n; ++r) {
    out[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
  }
  return out;
}

Tensor Communicator::allgather(const Tensor& t) {
  KDP_CHECK(t.dim() != 0, ShapeError, "kdp::dist::allgather", "give the tensor a first dimension");
  const std::vector<float> mine = t.to_vector();
  const auto parts = allgather_bytes(mine.data(), mine.size() * sizeof(float));
  std::vector<float> all;
  for (size_t r = 0; r < parts.size(); ++r) {
    KDP_CHECK(parts[r].size() == mine.size() * sizeof(float), ShapeError, "kdp::dist::allgather",
              "rank {} sent {} elements but rank {} has {} ({})", r,
              parts[r].size() / sizeof(float), impl_->rank, mine.size(), t.shape().str());
    const auto* f = reinterpret_cast<const float*>(parts[r].data());
    all.insert(all.end(), f, f + mine.size());
  }
  return Tensor::from_host(all, t.shape().with(0, t.size(0) * impl_->size), t.device());
}

}  // namespace kdp::dist
