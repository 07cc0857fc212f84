#include "kdp/dist/communicator.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>

#include "algorithms/allreduce.hpp"
#include "backend.hpp"
#include "collective_queue.hpp"
#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/config.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/runtime.hpp"

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

// The transport, the watchdog over it and the order of collectives; destroyed
// in reverse (the queue's thread first).
struct Communicator::Impl {
  std::unique_ptr<detail::Backend> backend;
  CollectiveWatchdog watchdog;
  detail::CollectiveQueue queue;

  explicit Impl(std::unique_ptr<detail::Backend> b)
      : backend(std::move(b)),
        watchdog([this](const std::string& msg) { backend->abort(msg, 3); }),
        queue(*backend, watchdog) {}
};

namespace {

using detail::Collective;
using detail::Element;
using detail::OpInfo;

template <class T>
Element element_of();
template <>
Element element_of<float>() {
  return Element::Float;
}
template <>
Element element_of<double>() {
  return Element::Double;
}
template <>
Element element_of<int64_t>() {
  return Element::Int64;
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

// ---- each collective, written once: queued (i...) or run now ----------------------

// An in-place allreduce of `count` elements by the route algorithms::plan
// picks, then the average's scaling and `then`.
template <class T>
Collective allreduce_op(detail::Backend& b, T* data, size_t count, ReduceOp op,
                        const std::string& name, std::function<void()> then,
                        AllreduceRoute route = {}) {
  const double factor = op == ReduceOp::Average ? 1.0 / b.size() : 1.0;
  const algorithms::Plan plan = algorithms::plan(b, element_of<T>(), route);
  float* residual = route.residual;
  return {OpInfo{"allreduce", to_string(op), count, "elements", "", algorithms::name(plan)}, name,
          [&b, plan, data, count, op, residual] {
            algorithms::run(plan, b, data, count, element_of<T>(), op, residual);
          },
          [data, count, factor, then = std::move(then)] {
            if (factor != 1.0) scale_host(data, count, factor);
            if (then) then();
          }};
}

// A broadcast of `bytes` from `root`, then `then`.
Collective broadcast_op(detail::Backend& b, void* data, size_t bytes, int root,
                        const std::string& name, std::function<void()> then) {
  KDP_CHECK(root >= 0 && root < b.size(), ValueError, "root {} is not a rank of {}", root,
            b.size());
  return {OpInfo{"broadcast", root == 0 ? "from rank 0" : "from another rank", bytes, "bytes", ""},
          name, [&b, data, bytes, root] { b.broadcast(data, bytes, root); }, std::move(then)};
}

}  // namespace

// ---- Request -------------------------------------------------------------------

bool Request::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->complete;
}

std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>
Request::times() const {
  if (!state_) return {};
  std::lock_guard<std::mutex> lock(state_->mutex);
  return {state_->started, state_->ended};
}

const char* Request::route() const {
  return state_ ? state_->op.info.route : "";
}

void Request::wait() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->complete; });
  if (state_->error) std::rethrow_exception(state_->error);
}

// ---- Communicator ----------------------------------------------------------------

Communicator Communicator::world() {
  return Communicator(std::make_shared<Impl>(detail::world_backend()));
}

int Communicator::rank() const {
  return impl_->backend->rank();
}
int Communicator::size() const {
  return impl_->backend->size();
}
int Communicator::local_size() const {
  return impl_->backend->size(detail::Group::Node);
}
int Communicator::nodes() const {
  return impl_->backend->nodes();
}
Traffic Communicator::traffic() const {
  return impl_->backend->traffic();
}
CollectiveWatchdog& Communicator::watchdog() {
  return impl_->watchdog;
}
void Communicator::abort(const std::string& message, int code) {
  impl_->backend->abort(message, code);
  std::_Exit(code);  // not reached: every backend's abort ends the process
}

void Communicator::barrier() {
  detail::Backend& b = *impl_->backend;
  impl_->queue.run_now({OpInfo{"barrier", "", 0, "bytes", ""}, "", [&b] { b.barrier(); }, {}});
}

Request Communicator::iallreduce(Tensor& t, ReduceOp op) {
  return iallreduce(t, op, AllreduceRoute{});
}

Request Communicator::iallreduce(Tensor& t, ReduceOp op, const AllreduceRoute& route) {
  op = scale_for_device_average(t, op, size());
  HostView v = host_view(t, "kdp::dist::allreduce");
  Tensor target = t;
  auto st = impl_->queue.submit(allreduce_op(
      *impl_->backend, v.data, static_cast<size_t>(t.numel()), op, t.name(),
      [target, v] { copy_back(target, v); }, route));
  t.mark_written();
  return Request(st);
}

void Communicator::allreduce(Tensor& t, ReduceOp op) {
  op = scale_for_device_average(t, op, size());
  HostView v = host_view(t, "kdp::dist::allreduce");
  impl_->queue.run_now(allreduce_op(*impl_->backend, v.data, static_cast<size_t>(t.numel()), op,
                                    t.name(), [&t, &v] { copy_back(t, v); }));
  t.mark_written();
}

Request Communicator::iallreduce(float* data, size_t count, ReduceOp op) {
  return Request(impl_->queue.submit(allreduce_op(*impl_->backend, data, count, op, "", {})));
}

void Communicator::allreduce(float* data, size_t count, ReduceOp op) {
  impl_->queue.run_now(allreduce_op(*impl_->backend, data, count, op, "", {}));
}

void Communicator::allreduce(double* data, size_t count, ReduceOp op) {
  impl_->queue.run_now(allreduce_op(*impl_->backend, data, count, op, "", {}));
}

void Communicator::allreduce(int64_t* data, size_t count, ReduceOp op) {
  impl_->queue.run_now(allreduce_op(*impl_->backend, data, count, op, "", {}));
}

Part Communicator::reduce_scatter(double* data, size_t count) {
  detail::Backend& b = *impl_->backend;
  Part part{0, count};  // one rank: all of it (the queue runs nothing)
  impl_->queue.run_now(
      {OpInfo{"reduce-scatter", "sum", count, "elements", "", size() > 1 ? "ring" : "local"},
       "",
       [&b, &part, data, count] {
         part = algorithms::reduce_scatter(b, detail::Group::World, data, count);
       },
       {}});
  return part;
}

Part Communicator::part(size_t count) const {
  return algorithms::ring_part(size(), rank(), count);
}

void Communicator::allgather_parts(float* data, size_t count) {
  detail::Backend& b = *impl_->backend;
  impl_->queue.run_now(
      {OpInfo{"allgather", "of reduce-scatter parts", count, "elements", "",
              size() > 1 ? "ring" : "local"},
       "",
       [&b, data, count] { algorithms::allgather_parts(b, detail::Group::World, data, count); },
       {}});
}

Request Communicator::ibroadcast(Tensor& t, int root) {
  HostView v = host_view(t, "kdp::dist::broadcast");
  Tensor target = t;
  auto st = impl_->queue.submit(broadcast_op(*impl_->backend, v.data,
                                             static_cast<size_t>(t.numel()) * sizeof(float), root,
                                             t.name(), [target, v] { copy_back(target, v); }));
  t.mark_written();
  return Request(st);
}

void Communicator::broadcast(Tensor& t, int root) {
  HostView v = host_view(t, "kdp::dist::broadcast");
  impl_->queue.run_now(broadcast_op(*impl_->backend, v.data,
                                    static_cast<size_t>(t.numel()) * sizeof(float), root, t.name(),
                                    [&t, &v] { copy_back(t, v); }));
  t.mark_written();
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  impl_->queue.run_now(broadcast_op(*impl_->backend, data, bytes, root, "", {}));
}

namespace {
// Where each rank's part of a gather of `sizes` bytes lands: counts and
// displacements (int, as MPI takes them), and the total.
struct Placement {
  std::vector<int> counts, displs;
  size_t total = 0;
};
Placement place(const std::vector<int64_t>& sizes) {
  Placement p;
  for (int64_t s : sizes) {
    KDP_CHECK(static_cast<int64_t>(p.total) + s <= std::numeric_limits<int>::max(), ValueError,
              "a gather of more than 2 GiB in all is not supported ({} bytes so far)",
              static_cast<int64_t>(p.total) + s);
    p.counts.push_back(static_cast<int>(s));
    p.displs.push_back(static_cast<int>(p.total));
    p.total += static_cast<size_t>(s);
  }
  return p;
}
std::vector<std::vector<char>> split(const std::vector<char>& all, const Placement& p) {
  std::vector<std::vector<char>> out(p.counts.size());
  for (size_t r = 0; r < out.size(); ++r) {
    out[r].assign(all.begin() + p.displs[r], all.begin() + p.displs[r] + p.counts[r]);
  }
  return out;
}
}  // namespace

std::vector<std::vector<char>> Communicator::allgather_bytes(const void* data, size_t bytes) {
  const auto n = static_cast<size_t>(size());
  if (n == 1) {
    const auto* p = static_cast<const char*>(data);
    return {std::vector<char>(p, p + bytes)};
  }
  std::vector<int64_t> sizes(n, 0);
  sizes[static_cast<size_t>(rank())] = static_cast<int64_t>(bytes);
  allreduce(sizes.data(), n, ReduceOp::Sum);  // each rank contributed its own slot
  const Placement p = place(sizes);
  std::vector<char> all(p.total);
  detail::Backend& b = *impl_->backend;
  impl_->queue.run_now({OpInfo{"allgather", "", bytes, "bytes", ""},
                        "",
                        [&] { b.allgatherv(data, bytes, all.data(), p.counts, p.displs); },
                        {}});
  return split(all, p);
}

std::vector<std::vector<char>> Communicator::gather_bytes(const void* data, size_t bytes,
                                                          int root) {
  const auto n = static_cast<size_t>(size());
  KDP_CHECK(root >= 0 && root < size(), ValueError, "root {} is not a rank of {}", root, size());
  if (n == 1) {
    const auto* p = static_cast<const char*>(data);
    return {std::vector<char>(p, p + bytes)};
  }
  std::vector<int64_t> sizes(n, 0);
  sizes[static_cast<size_t>(rank())] = static_cast<int64_t>(bytes);
  allreduce(sizes.data(), n, ReduceOp::Sum);
  const Placement p = place(sizes);
  const bool here = rank() == root;
  std::vector<char> all(here ? p.total : 0);
  detail::Backend& b = *impl_->backend;
  impl_->queue.run_now({OpInfo{"gather", "", bytes, "bytes", ""},
                        "",
                        [&] { b.gatherv(data, bytes, all.data(), p.counts, p.displs, root); },
                        {}});
  if (!here) return {};
  return split(all, p);
}

Tensor Communicator::allgather(const Tensor& t) {
  KDP_CHECK(t.dim() != 0, ShapeError, "give the tensor a first dimension");
  const std::vector<float> mine = t.to_vector();
  const auto parts = allgather_bytes(mine.data(), mine.size() * sizeof(float));
  std::vector<float> all;
  for (size_t r = 0; r < parts.size(); ++r) {
    KDP_CHECK(parts[r].size() == mine.size() * sizeof(float), ShapeError,
              "rank {} sent {} elements but rank {} has {} ({})", r,
              parts[r].size() / sizeof(float), rank(), mine.size(), t.shape().str());
    const auto* f = reinterpret_cast<const float*>(parts[r].data());
    all.insert(all.end(), f, f + mine.size());
  }
  return Tensor::from_host(all, t.shape().with(0, t.size(0) * size()), t.device());
}

}  // namespace kdp::dist
