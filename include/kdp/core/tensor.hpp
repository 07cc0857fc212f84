#pragma once
/// \file
/// Tensor: a shared handle to contiguous float memory on a Device with a shape
/// of rank 0 to 6 (Shape::kMaxRank; row-major) and, when it takes part in
/// autograd, its gradient and the node that made it. Copying a Tensor copies
/// the handle, as in PyTorch.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kdp/core/device.hpp"
#include "kdp/core/shape.hpp"
#include "kdp/core/storage.hpp"

namespace kdp {

namespace autograd {
class Node;
}

class Tensor;

/// Called with a leaf's gradient once backward has accumulated every
/// contribution to it (the gradient is final for this backward pass).
using GradReadyHook = std::function<void(Tensor& grad)>;

/// Unmanaged Views over a tensor's memory, the form kernels see it in.
using View1 =
    Kokkos::View<float*, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using View2 =
    Kokkos::View<float**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using ConstView1 = Kokkos::View<const float*, Kokkos::LayoutRight, MemSpace,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using ConstView2 = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// The state behind a Tensor handle.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in floats, into storage
  Shape shape;
  Device device{std::shared_ptr<detail::DeviceState>()};

  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  int output_nr = 0;                        // which output of grad_fn this is
  std::weak_ptr<autograd::Node> grad_accumulator;
  std::vector<std::pair<uint64_t, GradReadyHook>> grad_ready_hooks;
  std::mutex grad_mutex;
  std::string name;  // used in error messages ("fc1.weight")
};

/// A shared handle to float memory on a Device with a shape of rank 0 to 6.
class Tensor {
 public:
  /// An undefined tensor (no storage); defined() is false.
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories -----------------------------------------------------------
  /// Uninitialised memory from the caching allocator.
  static Tensor empty(const Shape& shape, const Device& device = get_default_device());
  /// Uninitialised memory in a dedicated View labelled `label` (for parameters).
  static Tensor empty_labeled(const Shape& shape, const Device& device, const std::string& label);
  static Tensor zeros(const Shape& shape, const Device& device = get_default_device());
  static Tensor ones(const Shape& shape, const Device& device = get_default_device());
  static Tensor full(const Shape& shape, float value, const Device& device = get_default_device());
  /// Standard normal samples from the device's generator.
  static Tensor randn(const Shape& shape, const Device& device = get_default_device());
  /// Uniform samples in [low, high) from the device's generator.
  static Tensor rand(const Shape& shape, const Device& device = get_default_device(),
                     float low = 0.0f, float high = 1.0f);
  /// 0, 1, ..., n-1.
  static Tensor arange(int64_t n, const Device& device = get_default_device());
  /// A copy of host memory; `values` must hold shape.numel() floats.
  static Tensor from_host(const std::vector<float>& values, const Shape& shape,
                          const Device& device = get_default_device());
  static Tensor from_host(const float* values, const Shape& shape,
                          const Device& device = get_default_device());
  /// A scalar (rank 0).
  static Tensor scalar(float value, const Device& device = get_default_device());

  // ---- shape and memory ----------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int dim() const { return shape().rank(); }
  int64_t size(int dim) const { return shape().size(dim); }
  int64_t numel() const { return shape().numel(); }
  const Device& device() const;
  float* data() const;
  /// The whole tensor as one row of numel() elements.
  View1 flat() const;
  ConstView1 cflat() const { return flat(); }
  /// A rank >= 1 tensor as [numel / last, last]; a scalar as [1, 1].
  View2 matrix() const;
  ConstView2 cmatrix() const { return matrix(); }
  /// The memory as [rows, cols]; rows * cols must equal numel().
  View2 matrix(int64_t rows, int64_t cols) const;
  ConstView2 cmatrix(int64_t rows, int64_t cols) const { return matrix(rows, cols); }

  /// A name used in error messages (parameters get their dotted names).
  const std::string& name() const;
  Tensor& set_name(std::string name);
  /// "tensor 'fc1.weight' [100, 10]" or "tensor [64, 10]".
  std::string describe() const;

  // ---- moving data ---------------------------------------------------------
  /// The tensor on `device`: itself when already there; a zero-copy alias when
  /// the memory is shared (after fencing this tensor's instance); a copy on the
  /// target instance otherwise. Differentiable.
  Tensor to(const Device& device) const;
  std::vector<float> to_vector() const;
  /// The value of a one-element tensor.
  float item() const;

  // ---- views and pieces (differentiable) -----------------------------------
  // PyTorch's method spellings, kept as members (x.reshape(...), loss.backward()).
  // They record autograd history, so to(), reshape(), slice(), chunk() and
  // clone() are defined with the ops that record it (src/ops/shape.cpp) and
  // backward() with the engine (src/autograd/engine.cpp): the one place where
  // a member of a lower layer's class is defined by a higher layer.
  /// The same memory with another shape; one dimension may be -1.
  Tensor reshape(const std::vector<int64_t>& shape) const;
  Tensor view(const std::vector<int64_t>& shape) const { return reshape(shape); }
  /// Rows [start, end) along `dim`: zero-copy when dim is the first non-trivial
  /// dimension, a copy otherwise.
  Tensor slice(int dim, int64_t start, int64_t end) const;
  /// torch.chunk: ceil(size / chunks) per piece, the last one smaller; fewer
  /// pieces when the dimension is short.
  std::vector<Tensor> chunk(int chunks, int dim = 0) const;
  /// A differentiable copy with its own storage.
  Tensor clone() const;

  // ---- autograd ------------------------------------------------------------
  bool requires_grad() const;
  /// Marks a leaf as needing a gradient (like PyTorch's requires_grad_()).
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;
  /// The accumulated gradient (undefined until a backward reaches this leaf).
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  /// The same memory without history (no gradient flows through it).
  Tensor detach() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  /// Runs backward from this tensor (see kdp::backward in kdp/autograd/engine.hpp).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  /// Registers a hook fired when this leaf's gradient is final in a backward
  /// pass; returns an id for remove_grad_ready_hook().
  uint64_t add_grad_ready_hook(GradReadyHook hook);
  void remove_grad_ready_hook(uint64_t id);

  // ---- in-place writes (not recorded by autograd) --------------------------
  Tensor& fill_(float value);
  Tensor& zero_() { return fill_(0.0f); }
  /// Copies `src` (same number of elements) into this tensor's memory.
  Tensor& copy_(const Tensor& src);
  /// Makes this tensor view `src`'s memory instead of its own (same shape, same
  /// device memory), as PyTorch's `param.data = src`: every handle to this
  /// tensor sees the new values, and nothing is copied.
  Tensor& set_data(const Tensor& src);
  /// this += alpha * other (same shape).
  Tensor& add_(const Tensor& other, float alpha = 1.0f);
  /// this *= value.
  Tensor& mul_(float value);
  /// The storage's in-place write counter (see Storage::version).
  uint64_t version() const;
  /// Records an in-place write to the storage made outside Tensor's own
  /// in-place ops (a kernel, a collective, an optimizer writing through
  /// data()), so that autograd refuses a backward that saved the old values.
  void mark_written() const;

  // ---- identity ------------------------------------------------------------
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  /// Whether both tensors view the same storage.
  bool shares_storage(const Tensor& other) const;

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

/// Makes a tensor that aliases `base`'s storage at `offset` with `shape`.
Tensor alias(const Tensor& base, int64_t offset, const Shape& shape, const Device& device);

/// Concatenates along `dim` (differentiable); all tensors on one device, with
/// equal sizes in the other dimensions.
Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);

/// Prints shape, device and (up to 20) values.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace kdp
