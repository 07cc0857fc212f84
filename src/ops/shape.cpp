// Tensor methods that move or cut data (reshape, slice, chunk, cat, to, clone)
// and the functions of kdp/ops/shape.hpp (permute, expand, narrow, split, ...),
// with their backward. They live in ops because they record autograd nodes.

#include "kdp/ops/shape.hpp"

#include <algorithm>
#include <numeric>

#include "core/check.hpp"
#include "core/tensor_kernels.hpp"
#include "kdp/core/kokkos_compat.hpp"
#include "kdp/core/trace.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

// out[o, d, i] = x[o, start + d, i] for out's [outer, size, inner].
void slice_copy_kernel(const Device& device, View1 out, ConstView1 x, DimSplit xs, int64_t start,
                       int64_t size) {
  kdp::detail::for_each_2d(
      "kdp::slice", device, xs.outer * size, xs.inner,
      KOKKOS_LAMBDA(const int64_t r, const int64_t i) {
        const int64_t o = r / size;
        const int64_t d = r % size;
        out(r * xs.inner + i) = x((o * xs.size + start + d) * xs.inner + i);
      });
}

// out[o, start + d, i] = x[o, d, i] (the inverse placement).
void place_kernel(const Device& device, View1 out, DimSplit os, ConstView1 x, int64_t start,
                  int64_t size) {
  kdp::detail::for_each_2d(
      "kdp::place", device, os.outer * size, os.inner,
      KOKKOS_LAMBDA(const int64_t r, const int64_t i) {
        const int64_t o = r / size;
        const int64_t d = r % size;
        out((o * os.size + start + d) * os.inner + i) = x(r * os.inner + i);
      });
}

// Rows [start, start + size) of `x` along `dim`, without recording: an alias when
// the rows are contiguous in memory, a copy otherwise.
Tensor slice_raw(const Tensor& x, int dim, int64_t start, int64_t size) {
  const DimSplit s = split_at(x.shape(), dim);
  const Shape shape = x.shape().with(dim, size);
  if (s.outer == 1 || size == s.size) {
    if (size == s.size && start == 0) return alias(x, 0, shape, x.device());
    if (s.outer == 1) return alias(x, start * s.inner, shape, x.device());
  }
  Tensor out = Tensor::empty(shape, x.device());
  slice_copy_kernel(x.device(), out.flat(), x.cflat(), s, start, size);
  return out;
}

// Gradient of pieces of one tensor along `dim`: their concatenation, with zeros
// for pieces that got no gradient.
Tensor join_pieces(const Device& device, const Shape& full, int dim,
                   const std::vector<int64_t>& sizes, std::vector<Tensor>& grads) {
  const DimSplit s = split_at(full, dim);
  Tensor out = Tensor::empty(full, device);
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t size = sizes[k];
    Tensor g = grads[k];
    if (!g.defined()) {
      g = Tensor::zeros(full.with(dim, size), device);
    } else if (g.device() != device) {
      g = g.to(device);
    }
    place_kernel(device, out.flat(), s, g.cflat(), start, size);
    start += size;
  }
  return out;
}

class ReshapeNode : public autograd::Node {
 public:
  ReshapeNode(const Tensor& x) : Node(x.device()), shape_(x.shape()) {}
  const char* name() const override { return "kdp::reshape"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {alias(grads[0], 0, shape_, grads[0].device())};
  }

 private:
  Shape shape_;
};

class SliceNode : public autograd::Node {
 public:
  SliceNode(const Tensor& x, int dim, int64_t start, int64_t size)
      : Node(x.device()), shape_(x.shape()), dim_(dim), start_(start), size_(size) {}
  const char* name() const override { return "kdp::slice"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor gx = Tensor::zeros(shape_, device());
    place_kernel(device(), gx.flat(), split_at(shape_, dim_), grads[0].cflat(), start_, size_);
    return {gx};
  }

 private:
  Shape shape_;
  int dim_;
  int64_t start_, size_;
};

// Pieces of one tensor (chunk): one node with an output per piece.
class SplitNode : public autograd::Node {
 public:
  SplitNode(const Tensor& x, int dim, std::vector<int64_t> sizes)
      : Node(x.device(), static_cast<int>(sizes.size())),
        shape_(x.shape()),
        dim_(dim),
        sizes_(std::move(sizes)) {}
  const char* name() const override { return "kdp::chunk"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {join_pieces(device(), shape_, dim_, sizes_, grads)};
  }

 private:
  Shape shape_;
  int dim_;
  std::vector<int64_t> sizes_;
};

class CatNode : public autograd::Node {
 public:
  CatNode(const Device& device, int dim, std::vector<int64_t> sizes)
      : Node(device), dim_(dim), sizes_(std::move(sizes)) {}
  const char* name() const override { return "kdp::cat"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    std::vector<Tensor> out;
    out.reserve(sizes_.size());
    int64_t start = 0;
    for (int64_t size : sizes_) {
      out.push_back(slice_raw(g, dim_, start, size));
      start += size;
    }
    return out;
  }

 private:
  int dim_;
  std::vector<int64_t> sizes_;
};

class ToDeviceNode : public autograd::Node {
 public:
  ToDeviceNode(const Device& target, const Device& source) : Node(target), source_(source) {}
  const char* name() const override { return "kdp::to"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override { return {grads[0].to(source_)}; }

 private:
  Device source_;
};

class CloneNode : public autograd::Node {
 public:
  explicit CloneNode(const Device& device) : Node(device) {}
  const char* name() const override { return "kdp::clone"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override { return {grads[0]}; }
};

constexpr int kRank = Shape::kMaxRank;

// A tensor's elements as another shape reads them: out's sizes (padded in
// front with 1 to kRank) and, per dimension, the step in x's memory (0 where
// x is broadcast).
struct Strided {
  int64_t dims[kRank];
  int64_t step[kRank];
};

// out[j] = x[sum over d of coordinate d of j * step[d]]. Each work item
// copies one row of out's last dimension (its start found once, over the
// dimensions that are not padding), so that the division per coordinate is
// paid per row, not per element; memory a GPU reads goes element by element.
void gather_kernel(const char* label, const Device& device, View1 out, ConstView1 x, Strided s) {
  int first = 0;  // the first dimension that is not padding
  while (first < kRank - 1 && s.dims[first] == 1) ++first;
  if (!compat::host_accessible_memory()) {
    Kokkos::parallel_for(
        label, kdp::detail::range(device, static_cast<int64_t>(out.extent(0))),
        KOKKOS_LAMBDA(const int64_t j) {
          int64_t rest = j;
          int64_t at = 0;
          for (int d = kRank - 1; d >= first; --d) {
            at += (rest % s.dims[d]) * s.step[d];
            rest /= s.dims[d];
          }
          out(j) = x(at);
        });
    return;
  }
  const int64_t inner = s.dims[kRank - 1], step = s.step[kRank - 1];
  const int64_t rows = static_cast<int64_t>(out.extent(0)) / inner;
  Kokkos::parallel_for(
      label, kdp::detail::range(device, rows), KOKKOS_LAMBDA(const int64_t r) {
        int64_t rest = r;
        int64_t at = 0;
        for (int d = kRank - 2; d >= first; --d) {
          at += (rest % s.dims[d]) * s.step[d];
          rest /= s.dims[d];
        }
        float* to = out.data() + r * inner;
        const float* from = x.data() + at;
        if (step == 1) {
          for (int64_t i = 0; i < inner; ++i) to[i] = from[i];
        } else {
          for (int64_t i = 0; i < inner; ++i) to[i] = from[i * step];
        }
      });
}

// Row-major strides of `shape`.
std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> strides(static_cast<size_t>(shape.rank()), 1);
  for (int d = shape.rank() - 2; d >= 0; --d) {
    strides[static_cast<size_t>(d)] = strides[static_cast<size_t>(d) + 1] * shape[d + 1];
  }
  return strides;
}

// x with its dimensions in the order `perm` (a checked permutation), without
// recording.
Tensor permute_raw(const Tensor& x, const std::vector<int>& perm) {
  const std::vector<int64_t> xs = strides_of(x.shape());
  std::vector<int64_t> dims(perm.size());
  Strided s{};
  const int pad = kRank - static_cast<int>(perm.size());
  for (int d = 0; d < kRank; ++d) {
    s.dims[d] = 1;
    s.step[d] = 0;
  }
  for (size_t i = 0; i < perm.size(); ++i) {
    dims[i] = x.size(perm[i]);
    s.dims[pad + static_cast<int>(i)] = dims[i];
    s.step[pad + static_cast<int>(i)] = xs[static_cast<size_t>(perm[i])];
  }
  Tensor out = Tensor::empty(Shape(dims), x.device());
  if (out.numel() > 0) gather_kernel("kdp::permute", x.device(), out.flat(), x.cflat(), s);
  return out;
}

class PermuteNode : public autograd::Node {
 public:
  PermuteNode(const Tensor& x, const std::vector<int>& perm) : Node(x.device()), inverse_(perm) {
    for (size_t i = 0; i < perm.size(); ++i) inverse_[static_cast<size_t>(perm[i])] = int(i);
  }
  const char* name() const override { return "kdp::permute"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {permute_raw(grads[0], inverse_)};
  }

 private:
  std::vector<int> inverse_;
};

class ExpandNode : public autograd::Node {
 public:
  explicit ExpandNode(const Tensor& x) : Node(x.device()), shape_(x.shape()) {}
  const char* name() const override { return "kdp::expand"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    return {sum_to(grads[0], shape_)};
  }

 private:
  Shape shape_;
};

// Pieces of `sizes` along `d` (they sum to its size), recorded by one node.
std::vector<Tensor> split_sizes(const Tensor& x, int d, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(slice_raw(x, d, start, s));
    start += s;
  }
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SplitNode>(x, d, sizes);
    node->set_next_edges({&x});
    for (size_t k = 0; k < pieces.size(); ++k) {
      autograd::set_history(pieces[k], node, static_cast<int>(k));
    }
  }
  return pieces;
}

int checked_dim(const char* op, const Shape& shape, int dim) {
  try {
    if (shape.rank() == 0) throw ShapeError("a scalar has no dimensions");  // caught below
    return shape.normalize_dim(dim);
  } catch (const ShapeError& e) {
    KDP_FAIL_FOR(op, ShapeError, "{}", e.what());
  }
}

}  // namespace ops_detail

using namespace ops_detail;

Tensor Tensor::reshape(const std::vector<int64_t>& dims) const {
  const Tensor& x = resolve(*this);
  ops_detail::check_defined("kdp::reshape", x, "input");
  std::vector<int64_t> shape = dims;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      KDP_CHECK(infer < 0, ShapeError, "only one dimension can be -1");
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  auto describe_target = [&] { return fmt::format("[{}]", fmt::join(dims, ", ")); };
  if (infer >= 0) {
    KDP_CHECK(known != 0 && x.numel() % known == 0, ShapeError,
              "cannot view {} ({} elements) as {}", x.shape().str(), x.numel(), describe_target());
    shape[static_cast<size_t>(infer)] = x.numel() / known;
  }
  const Shape target(shape);
  KDP_CHECK(target.numel() == x.numel(), ShapeError, "cannot view {} ({} elements) as {}",
            x.shape().str(), x.numel(), describe_target());
  Tensor out = alias(x, 0, target, x.device());
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<ReshapeNode>(x);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  const Tensor& x = resolve(*this);
  ops_detail::check_defined("kdp::slice", x, "input");
  const int d = checked_dim("kdp::slice", x.shape(), dim);
  KDP_CHECK(start >= 0 && end >= start && end <= x.size(d), ShapeError,
            "[{}, {}) is not a range of dimension {} of {}", start, end, d, x.shape().str());
  Tensor out = slice_raw(x, d, start, end - start);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<SliceNode>(x, d, start, end - start);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

std::vector<Tensor> Tensor::chunk(int chunks, int dim) const {
  const Tensor& x = resolve(*this);
  ops_detail::check_defined("kdp::chunk", x, "input");
  KDP_CHECK(chunks >= 1, ValueError, "needs at least one chunk, got {}", chunks);
  const int d = checked_dim("kdp::chunk", x.shape(), dim);
  const int64_t size = x.size(d);
  const int64_t step = std::max<int64_t>(1, (size + chunks - 1) / chunks);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < size; start += step)
    sizes.push_back(std::min(step, size - start));
  if (sizes.empty()) sizes.push_back(0);

  return split_sizes(x, d, sizes);
}

Tensor Tensor::clone() const {
  const Tensor& x = resolve(*this);
  ops_detail::check_defined("kdp::clone", x, "input");
  Tensor out = Tensor::empty(x.shape(), x.device());
  detail::copy(x.device(), out.flat(), x.cflat());
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<CloneNode>(x.device());
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor Tensor::to(const Device& device) const {
  const Tensor& x = resolve(*this);
  ops_detail::check_defined("kdp::to", x, "input");
  if (x.device() == device) return x;
  // Work queued on the source instance must be done before another instance reads.
  x.device().fence("kdp::Tensor::to");
  Tensor out;
  if (x.device().memory_id() == device.memory_id()) {
    out = alias(x, 0, x.shape(), device);
  } else {
    out = Tensor::empty(x.shape(), device);
    Kokkos::deep_copy(device.space(), out.flat(), x.cflat());
  }
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<ToDeviceNode>(device, x.device());
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor cat(const std::vector<Tensor>& inputs, int dim) {
  trace::Region region("kdp::cat");
  KDP_CHECK(!inputs.empty(), ValueError, "needs at least one tensor");
  std::vector<Tensor> xs;
  xs.reserve(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    xs.push_back(resolve(inputs[k]));
    KDP_CHECK(xs.back().defined(), StateError, "tensor {} is undefined", k);
  }
  const Tensor& first = xs[0];
  const int d = checked_dim("kdp::cat", first.shape(), dim);
  int64_t total = 0;
  std::vector<int64_t> sizes;
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = xs[k];
    KDP_CHECK(x.dim() == first.dim(), ShapeError,
              "tensor {} {} has rank {}, tensor 0 {} has rank {}", k, x.shape().str(), x.dim(),
              first.shape().str(), first.dim());
    for (int i = 0; i < x.dim(); ++i) {
      KDP_CHECK(i == d || x.size(i) == first.size(i), ShapeError,
                "tensor {} {} differs from tensor 0 {} in dimension {} (only dimension {} "
                "may differ)",
                k, x.shape().str(), first.shape().str(), i, d);
    }
    KDP_CHECK(x.device() == first.device(), DeviceError, "tensor {} is on {}, tensor 0 on {}", k,
              x.device().str(), first.device().str());
    sizes.push_back(x.size(d));
    total += x.size(d);
  }
  const Shape shape = first.shape().with(d, total);
  Tensor out = Tensor::empty(shape, first.device());
  const DimSplit os = split_at(shape, d);
  int64_t start = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    place_kernel(first.device(), out.flat(), os, xs[k].cflat(), start, sizes[k]);
    start += sizes[k];
  }
  if (autograd::needs_grad(xs)) {
    auto node = std::make_shared<CatNode>(first.device(), d, sizes);
    node->set_next_edges(xs);
    autograd::set_history(out, node);
  }
  return out;
}

Tensor permute(const Tensor& x_in, const std::vector<int>& dims) {
  trace::Region region("kdp::permute");
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::permute", x, "input");
  KDP_CHECK(static_cast<int>(dims.size()) == x.dim(), ShapeError,
            "[{}] names {} dimension(s), but {} has {}", fmt::join(dims, ", "), dims.size(),
            x.shape().str(), x.dim());
  std::vector<int> perm(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int d = checked_dim("kdp::permute", x.shape(), dims[i]);
    KDP_CHECK(!seen[static_cast<size_t>(d)], ShapeError,
              "[{}] names dimension {} twice (of {}): not a permutation", fmt::join(dims, ", "), d,
              x.shape().str());
    seen[static_cast<size_t>(d)] = true;
    perm[i] = d;
  }
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int>(i);
  if (identity) return x.reshape(x.shape().to_vector());
  Tensor out = permute_raw(x, perm);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<PermuteNode>(x, perm);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor transpose(const Tensor& x_in, int dim0, int dim1) {
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::transpose", x, "input");
  const int a = checked_dim("kdp::transpose", x.shape(), dim0);
  const int b = checked_dim("kdp::transpose", x.shape(), dim1);
  std::vector<int> perm(static_cast<size_t>(x.dim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
  return permute(x, perm);
}

Tensor contiguous(const Tensor& x) {
  return x;
}

Tensor narrow(const Tensor& x_in, int dim, int64_t start, int64_t length) {
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::narrow", x, "input");
  const int d = checked_dim("kdp::narrow", x.shape(), dim);
  const int64_t size = x.size(d);
  const int64_t from = start < 0 ? start + size : start;
  KDP_CHECK(from >= 0 && length >= 0 && from + length <= size, ShapeError,
            "start {} and length {} are not a range of dimension {} of {} (size {})", start, length,
            d, x.shape().str(), size);
  return x.slice(d, from, from + length);
}

Tensor select(const Tensor& x_in, int dim, int64_t index) {
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::select", x, "input");
  const int d = checked_dim("kdp::select", x.shape(), dim);
  const int64_t size = x.size(d);
  const int64_t at = index < 0 ? index + size : index;
  KDP_CHECK(at >= 0 && at < size, ShapeError, "index {} is out of range for dimension {} of {}",
            index, d, x.shape().str());
  std::vector<int64_t> dims = x.shape().to_vector();
  dims.erase(dims.begin() + d);
  return x.slice(d, at, at + 1).reshape(dims);
}

Tensor unsqueeze(const Tensor& x_in, int dim) {
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::unsqueeze", x, "input");
  const int rank = x.dim();
  KDP_CHECK(dim >= -rank - 1 && dim <= rank, ShapeError,
            "dimension {} is out of range for {} (expected [{}, {}])", dim, x.shape().str(),
            -rank - 1, rank);
  KDP_CHECK(rank < Shape::kMaxRank, ShapeError, "{} has the most dimensions a tensor may have ({})",
            x.shape().str(), Shape::kMaxRank);
  const int d = dim < 0 ? dim + rank + 1 : dim;
  std::vector<int64_t> dims = x.shape().to_vector();
  dims.insert(dims.begin() + d, 1);
  return x.reshape(dims);
}

Tensor squeeze(const Tensor& x_in, int dim) {
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::squeeze", x, "input");
  const int d = checked_dim("kdp::squeeze", x.shape(), dim);
  if (x.size(d) != 1) return x;
  std::vector<int64_t> dims = x.shape().to_vector();
  dims.erase(dims.begin() + d);
  return x.reshape(dims);
}

Tensor expand(const Tensor& x_in, const std::vector<int64_t>& sizes) {
  trace::Region region("kdp::expand");
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::expand", x, "input");
  const int rank = static_cast<int>(sizes.size());
  const int lead = rank - x.dim();
  auto target_str = [&] { return fmt::format("[{}]", fmt::join(sizes, ", ")); };
  KDP_CHECK(lead >= 0 && rank <= Shape::kMaxRank, ShapeError,
            "cannot expand {} to {}: the target needs at least as many dimensions", x.shape().str(),
            target_str());
  std::vector<int64_t> dims(sizes);
  const std::vector<int64_t> xs = strides_of(x.shape());
  Strided s{};
  const int pad = kRank - rank;
  for (int d = 0; d < kRank; ++d) {
    s.dims[d] = 1;
    s.step[d] = 0;
  }
  for (int i = 0; i < rank; ++i) {
    const int xd = i - lead;
    const int64_t have = xd >= 0 ? x.size(xd) : 1;
    if (dims[static_cast<size_t>(i)] == -1) {
      KDP_CHECK(xd >= 0, ShapeError, "cannot expand {} to {}: -1 in a new leading dimension",
                x.shape().str(), target_str());
      dims[static_cast<size_t>(i)] = have;
    }
    const int64_t want = dims[static_cast<size_t>(i)];
    KDP_CHECK(want >= 0 && (have == want || have == 1), ShapeError,
              "cannot expand {} to {}: dimension {} of size {} is neither {} nor 1",
              x.shape().str(), target_str(), i, have, want);
    s.dims[pad + i] = want;
    s.step[pad + i] = (xd >= 0 && have == want) ? xs[static_cast<size_t>(xd)] : 0;
  }
  const Shape shape(dims);
  if (shape == x.shape()) return x.reshape(dims);
  Tensor out = Tensor::empty(shape, x.device());
  if (out.numel() > 0) gather_kernel("kdp::expand", x.device(), out.flat(), x.cflat(), s);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<ExpandNode>(x);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x_in, int64_t split_size, int dim) {
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::split", x, "input");
  const int d = checked_dim("kdp::split", x.shape(), dim);
  KDP_CHECK(split_size >= 1, ValueError, "split_size {} must be at least 1", split_size);
  const int64_t size = x.size(d);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < size; start += split_size) {
    sizes.push_back(std::min(split_size, size - start));
  }
  if (sizes.empty()) sizes.push_back(0);
  return split_sizes(x, d, sizes);
}

std::vector<Tensor> split(const Tensor& x_in, const std::vector<int64_t>& sizes, int dim) {
  const Tensor& x = resolve(x_in);
  ops_detail::check_defined("kdp::split", x, "input");
  const int d = checked_dim("kdp::split", x.shape(), dim);
  int64_t total = 0;
  for (int64_t s : sizes) {
    KDP_CHECK(s >= 0, ShapeError, "split sizes [{}] hold a negative size", fmt::join(sizes, ", "));
    total += s;
  }
  KDP_CHECK(!sizes.empty() && total == x.size(d), ShapeError,
            "split sizes [{}] sum to {}, but dimension {} of {} has {}", fmt::join(sizes, ", "),
            total, d, x.shape().str(), x.size(d));
  return split_sizes(x, d, sizes);
}

}  // namespace kdp
