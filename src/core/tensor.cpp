#include "kdp/core/tensor.hpp"

#include "core/check.hpp"
#include "kdp/core/runtime.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "core/parallel_for.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/core/binding.hpp"
#include "kdp/core/error.hpp"

namespace kdp {

namespace detail {
thread_local const TensorBindings* current_bindings = nullptr;
}

void TensorBindings::bind(const Tensor& original, Tensor replacement) {
  map_[original.impl().get()] = std::move(replacement);
}

namespace {

using HostView1 = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using ConstHostView1 =
    Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

std::shared_ptr<TensorImpl> make_impl(std::shared_ptr<Storage> storage, const Shape& shape,
                                      const Device& device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->device = device;
  return impl;
}

}  // namespace

namespace detail {

void fill(const Device& device, View1 out, float value) {
  Kokkos::parallel_for(
      "kdp::fill", range(device, static_cast<int64_t>(out.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { out(i) = value; });
}

void fill_randn(const Device& device, View1 out, uint64_t seed, uint64_t base) {
  Kokkos::parallel_for(
      "kdp::randn", range(device, static_cast<int64_t>(out.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { out(i) = random::normal(seed, base + i); });
}

void fill_rand(const Device& device, View1 out, uint64_t seed, uint64_t base, float low,
               float high) {
  const float width = high - low;
  Kokkos::parallel_for(
      "kdp::rand", range(device, static_cast<int64_t>(out.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { out(i) = low + width * random::uniform(seed, base + i); });
}

void fill_arange(const Device& device, View1 out) {
  Kokkos::parallel_for(
      "kdp::arange", range(device, static_cast<int64_t>(out.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { out(i) = static_cast<float>(i); });
}

void axpy(const Device& device, View1 y, float alpha, ConstView1 x) {
  Kokkos::parallel_for(
      "kdp::add_", range(device, static_cast<int64_t>(y.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { y(i) += alpha * x(i); });
}

void scale(const Device& device, View1 y, float alpha) {
  Kokkos::parallel_for(
      "kdp::mul_", range(device, static_cast<int64_t>(y.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { y(i) *= alpha; });
}

void add(const Device& device, View1 out, ConstView1 a, ConstView1 b) {
  Kokkos::parallel_for(
      "kdp::add", range(device, static_cast<int64_t>(out.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { out(i) = a(i) + b(i); });
}

void copy(const Device& device, View1 dst, ConstView1 src) {
  Kokkos::parallel_for(
      "kdp::copy", range(device, static_cast<int64_t>(dst.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { dst(i) = src(i); });
}

}  // namespace detail

// ---- factories -------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, const Device& device) {
  auto storage = std::make_shared<Storage>(static_cast<size_t>(shape.numel()), device);
  return Tensor(make_impl(std::move(storage), shape, device));
}

Tensor Tensor::empty_labeled(const Shape& shape, const Device& device, const std::string& label) {
  auto storage = std::make_shared<Storage>(static_cast<size_t>(shape.numel()), device, label);
  return Tensor(make_impl(std::move(storage), shape, device));
}

Tensor Tensor::zeros(const Shape& shape, const Device& device) {
  return full(shape, 0.0f, device);
}

Tensor Tensor::ones(const Shape& shape, const Device& device) {
  return full(shape, 1.0f, device);
}

Tensor Tensor::full(const Shape& shape, float value, const Device& device) {
  Tensor t = empty(shape, device);
  detail::fill(device, t.flat(), value);
  return t;
}

Tensor Tensor::scalar(float value, const Device& device) {
  return full(Shape{}, value, device);
}

Tensor Tensor::randn(const Shape& shape, const Device& device) {
  Tensor t = empty(shape, device);
  Generator& gen = device.generator();
  const uint64_t seed = gen.seed();
  const uint64_t base = gen.reserve(static_cast<uint64_t>(t.numel()));
  detail::fill_randn(device, t.flat(), seed, base);
  return t;
}

Tensor Tensor::rand(const Shape& shape, const Device& device, float low, float high) {
  KDP_CHECK(low < high, ValueError, "need low < high, got [{}, {})", low, high);
  Tensor t = empty(shape, device);
  Generator& gen = device.generator();
  const uint64_t seed = gen.seed();
  const uint64_t base = gen.reserve(static_cast<uint64_t>(t.numel()));
  detail::fill_rand(device, t.flat(), seed, base, low, high);
  return t;
}

Tensor Tensor::arange(int64_t n, const Device& device) {
  Tensor t = empty(Shape{n}, device);
  detail::fill_arange(device, t.flat());
  return t;
}

Tensor Tensor::from_host(const std::vector<float>& values, const Shape& shape,
                         const Device& device) {
  KDP_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), ShapeError,
            "{} values do not fill shape {} ({})", values.size(), shape.str(), shape.numel());
  return from_host(values.data(), shape, device);
}

Tensor Tensor::from_host(const float* values, const Shape& shape, const Device& device) {
  Tensor t = empty(shape, device);
  const auto n = static_cast<size_t>(shape.numel());
  if (n > 0) {
    ConstHostView1 src(values, n);
    Kokkos::deep_copy(device.space(), t.flat(), src);
    device.fence("kdp::Tensor::from_host");  // the host memory may go away after return
    Runtime::get().count_transfer(/*to_host=*/false, n * sizeof(float));
  }
  return t;
}

// ---- accessors --------------------------------------------------------------

void Tensor::check_defined(const char* what) const {
  KDP_CHECK_FOR(std::string("kdp::Tensor::") + what, impl_ != nullptr, StateError,
                "the tensor is undefined");
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}

const Device& Tensor::device() const {
  check_defined("device");
  return impl_->device;
}

float* Tensor::data() const {
  check_defined("data");
  return impl_->storage->data() + impl_->offset;
}

View1 Tensor::flat() const {
  return View1(data(), static_cast<size_t>(numel()));
}

View2 Tensor::matrix() const {
  const Shape& s = shape();
  if (s.rank() == 0) return View2(data(), 1, 1);
  const int64_t cols = s[s.rank() - 1];
  const int64_t rows = cols == 0 ? 0 : s.numel() / cols;
  return View2(data(), static_cast<size_t>(rows), static_cast<size_t>(cols));
}

View2 Tensor::matrix(int64_t rows, int64_t cols) const {
  KDP_CHECK(rows * cols == numel(), ShapeError, "[{}, {}] does not cover {}", rows, cols,
            describe());
  return View2(data(), static_cast<size_t>(rows), static_cast<size_t>(cols));
}

const std::string& Tensor::name() const {
  check_defined("name");
  return impl_->name;
}

Tensor& Tensor::set_name(std::string name) {
  check_defined("set_name");
  impl_->name = std::move(name);
  return *this;
}

std::string Tensor::describe() const {
  if (!impl_) return "undefined tensor";
  if (impl_->name.empty()) return fmt::format("tensor {}", impl_->shape.str());
  return fmt::format("tensor '{}' {}", impl_->name, impl_->shape.str());
}

std::vector<float> Tensor::to_vector() const {
  check_defined("to_vector");
  std::vector<float> out(static_cast<size_t>(numel()));
  if (!out.empty()) {
    device().fence("kdp::Tensor::to_vector");
    HostView1 dst(out.data(), out.size());
    Kokkos::deep_copy(dst, cflat());
    Runtime::get().count_transfer(/*to_host=*/true, out.size() * sizeof(float));
  }
  return out;
}

float Tensor::item() const {
  KDP_CHECK(numel() == 1, ShapeError, "needs exactly one element, {} has {}", describe(), numel());
  if constexpr (compat::launches_are_synchronous()) {
    Runtime::get().count_transfer(/*to_host=*/true, sizeof(float));
    return *data();
  } else {
    return to_vector()[0];
  }
}

bool Tensor::shares_storage(const Tensor& other) const {
  return impl_ && other.impl_ && impl_->storage == other.impl_->storage;
}

uint64_t Tensor::version() const {
  check_defined("version");
  return impl_->storage->version();
}

void Tensor::mark_written() const {
  check_defined("mark_written");
  impl_->storage->bump_version();
}

// ---- autograd fields ----------------------------------------------------------

bool Tensor::requires_grad() const {
  return impl_ && impl_->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  check_defined("requires_grad_");
  KDP_CHECK(!impl_->grad_fn, StateError,
            "{} is the result of an op; only leaves can change "
            "requires_grad (use detach() for a leaf copy)",
            describe());
  impl_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  return !impl_ || !impl_->grad_fn;
}

Tensor Tensor::grad() const {
  check_defined("grad");
  std::lock_guard<std::mutex> lock(impl_->grad_mutex);
  return Tensor(impl_->grad);
}

void Tensor::set_grad(const Tensor& grad) {
  check_defined("set_grad");
  KDP_CHECK(!grad.defined() || grad.shape() == shape(), ShapeError, "gradient of shape {} for {}",
            grad.shape().str(), describe());
  std::lock_guard<std::mutex> lock(impl_->grad_mutex);
  impl_->grad = grad.impl();
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = make_impl(impl_->storage, impl_->shape, impl_->device);
  impl->offset = impl_->offset;
  impl->name = impl_->name;
  return Tensor(impl);
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  check_defined("grad_fn");
  return impl_->grad_fn;
}

uint64_t Tensor::add_grad_ready_hook(GradReadyHook hook) {
  check_defined("add_grad_ready_hook");
  KDP_CHECK(is_leaf(), StateError, "{} is not a leaf; grad-ready hooks fire on leaves", describe());
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(impl_->grad_mutex);
  impl_->grad_ready_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_grad_ready_hook(uint64_t id) {
  check_defined("remove_grad_ready_hook");
  std::lock_guard<std::mutex> lock(impl_->grad_mutex);
  auto& hooks = impl_->grad_ready_hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                             [id](const auto& entry) { return entry.first == id; }),
              hooks.end());
}

// ---- in-place writes --------------------------------------------------------------

Tensor& Tensor::fill_(float value) {
  check_defined("fill_");
  detail::fill(device(), flat(), value);
  mark_written();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src_in) {
  check_defined("copy_");
  const Tensor& src = resolve(src_in);
  KDP_CHECK(src.numel() == numel(), ShapeError, "cannot copy {} ({} elements) into {} ({})",
            src.describe(), src.numel(), describe(), numel());
  KDP_CHECK(src.device().memory_id() == device().memory_id(), DeviceError,
            "{} on {} and {} on {} do not share memory", src.describe(), src.device().str(),
            describe(), device().str());
  if (src.device() != device()) src.device().fence("kdp::Tensor::copy_ (source)");
  if (data() != src.data()) detail::copy(device(), flat(), src.cflat());
  mark_written();
  return *this;
}

Tensor& Tensor::set_data(const Tensor& src_in) {
  check_defined("set_data");
  const Tensor& src = resolve(src_in);
  KDP_CHECK(src.shape() == shape(), ShapeError, "{} cannot take the memory of {}", describe(),
            src.describe());
  KDP_CHECK(src.device().memory_id() == device().memory_id(), DeviceError,
            "{} on {} and {} on {} do not share memory", src.describe(), src.device().str(),
            describe(), device().str());
  if (src.device() != device()) src.device().fence("kdp::Tensor::set_data (source)");
  mark_written();  // what autograd saved of the old memory is stale
  impl_->storage = src.impl()->storage;
  impl_->offset = src.impl()->offset;
  mark_written();
  return *this;
}

Tensor& Tensor::add_(const Tensor& other_in, float alpha) {
  check_defined("add_");
  const Tensor& other = resolve(other_in);
  KDP_CHECK(other.shape() == shape(), ShapeError, "{} and {} differ in shape", describe(),
            other.describe());
  KDP_CHECK(other.device() == device(), DeviceError, "{} is on {}, {} on {}", describe(),
            device().str(), other.describe(), other.device().str());
  detail::axpy(device(), flat(), alpha, other.cflat());
  mark_written();
  return *this;
}

Tensor& Tensor::mul_(float value) {
  check_defined("mul_");
  detail::scale(device(), flat(), value);
  mark_written();
  return *this;
}

Tensor alias(const Tensor& base, int64_t offset, const Shape& shape, const Device& device) {
  auto impl = make_impl(base.impl()->storage, shape, device);
  impl->offset = base.impl()->offset + offset;
  return Tensor(impl);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  const std::vector<float> v = t.to_vector();
  const size_t shown = std::min<size_t>(v.size(), 20);
  os << "Tensor(" << t.shape().str() << ", " << t.device().str() << ", [";
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << v[i];
  if (shown < v.size()) os << ", ...";
  return os << "])";
}

}  // namespace kdp
