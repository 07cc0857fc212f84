#pragma once
/// \file
/// backward(): reverse-mode differentiation over the graph recorded by ops.
/// Nodes run in reverse order of creation as soon as every gradient they wait
/// for has arrived; gradients of leaves are accumulated into their .grad(), and
/// a leaf's grad-ready hooks fire the moment its gradient is final. Nodes of
/// devices on distinct concurrent instances run at the same time, one host
/// thread per instance.

#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// Gradients of `outputs` (each a scalar when `grads` is empty, or with the given
/// gradient) flow back to every leaf that requires grad. Without retain_graph the
/// graph's saved tensors are freed and a second backward through it throws.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

/// backward({output}, {grad}).
inline void backward(const Tensor& output, const Tensor& grad = Tensor(),
                     bool retain_graph = false) {
  backward(std::vector<Tensor>{output},
           grad.defined() ? std::vector<Tensor>{grad} : std::vector<Tensor>{}, retain_graph);
}

namespace autograd {
/// The leaves (tensors that require grad and have no grad_fn) whose gradients
/// a backward from `outputs` would reach.
std::vector<std::shared_ptr<TensorImpl>> reachable_leaves(const std::vector<Tensor>& outputs);
}  // namespace autograd

}  // namespace kdp
