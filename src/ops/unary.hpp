#pragma once
// The pattern every elementwise op of one tensor follows. An op is a functor F
// with `float operator()(float x)` (the forward) and `float grad(float x, float
// y, float g)` (dL/dx from the input x, the output y and dL/dy); unary() runs it
// and records a UnaryNode<F> that runs its gradient.

#include <string>
#include <type_traits>

#include "kdp/core/kokkos_compat.hpp"
#include "kdp/core/trace.hpp"
#include "kernels/native/host_kernels.hpp"
#include "op_util.hpp"

namespace kdp::ops_detail {

// Whether F brings kernels for host memory: static host_forward(x, y, n) and
// host_backward(x, y, g, gx, n), with its operator() and grad()'s results.
template <class F, class = void>
struct HasHostKernels : std::false_type {};
template <class F>
struct HasHostKernels<F, std::void_t<decltype(&F::host_forward), decltype(&F::host_backward)>>
    : std::true_type {};
constexpr int64_t kHostChunk = 8192;  // elements per task of the host threads

template <class F>
void unary_forward(const std::string& label, const Device& device, View1 out, ConstView1 x, F f) {
  if constexpr (HasHostKernels<F>::value && compat::launches_are_synchronous()) {
    const float* from = x.data();
    float* to = out.data();
    kdp::detail::host_chunks(
        label.c_str(), device, static_cast<int64_t>(out.extent(0)), kHostChunk,
        [=](int64_t b, int64_t e) { F::host_forward(from + b, to + b, e - b); });
    return;
  }
  Kokkos::parallel_for(
      label, kdp::detail::range(device, static_cast<int64_t>(out.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { out(i) = f(x(i)); });
}

template <class F>
void unary_backward(const std::string& label, const Device& device, View1 gx, ConstView1 g,
                    ConstView1 x, ConstView1 y, F f) {
  if constexpr (HasHostKernels<F>::value && compat::launches_are_synchronous()) {
    const float *xs = x.data(), *ys = y.data(), *gs = g.data();
    float* to = gx.data();
    kdp::detail::host_chunks(
        label.c_str(), device, static_cast<int64_t>(gx.extent(0)), kHostChunk,
        [=](int64_t b, int64_t e) { F::host_backward(xs + b, ys + b, gs + b, to + b, e - b); });
    return;
  }
  Kokkos::parallel_for(
      label, kdp::detail::range(device, static_cast<int64_t>(gx.extent(0))),
      KOKKOS_LAMBDA(const int64_t i) { gx(i) = f.grad(x(i), y(i), g(i)); });
}

template <class F>
class UnaryNode : public autograd::Node {
 public:
  UnaryNode(const char* name, const Device& device, F f, const Tensor& x, const Tensor& y)
      : Node(device), name_(name), f_(f), x_(x), y_(y) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const Tensor& x = x_.get(*this);
    const Tensor& y = y_.get(*this);
    Tensor gx = Tensor::empty(g.shape(), device());
    unary_backward(std::string(name_) + " backward", device(), gx.flat(), g.cflat(), x.cflat(),
                   y.cflat(), f_);
    return {gx};
  }
  void release_saved() override {
    x_.reset();
    y_.reset();
  }

 private:
  const char* name_;
  F f_;
  autograd::SavedTensor x_;
  autograd::SavedTensor y_;
};

template <class F>
Tensor unary(const char* name, const Tensor& x_in, F f) {
  trace::Region region(name);
  const Tensor& x = resolve(x_in);
  check_defined(name, x, "input");
  Tensor out = Tensor::empty(x.shape(), x.device());
  unary_forward(name, x.device(), out.flat(), x.cflat(), f);
  if (autograd::needs_grad({&x})) {
    auto node = std::make_shared<UnaryNode<F>>(name, x.device(), f, x, out);
    node->set_next_edges({&x});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kdp::ops_detail
