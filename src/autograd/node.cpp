#include "kdp/autograd/node.hpp"

#include <fmt/format.h>

#include <atomic>

#include "autograd/accumulate_grad.hpp"
#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::autograd {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (t.defined()) {
    tensor_ = t.detach();
    version_ = t.version();
  }
}

const Tensor& SavedTensor::get(const Node& owner) const {
  KDP_CHECK_FOR(std::string(owner.name()) + " backward", tensor_.defined(), StateError,
                "its saved tensors were freed by an earlier backward; pass retain_graph = true "
                "to backward through a graph twice");
  KDP_CHECK_FOR(std::string(owner.name()) + " backward", tensor_.version() == version_, StateError,
                "{} was saved for backward and then modified in place (version {} -> {}); "
                "gradients would be wrong",
                tensor_.describe(), version_, tensor_.version());
  return tensor_;
}

Node::Node(const Device& device, int num_outputs)
    : device_(device), num_outputs_(num_outputs), sequence_nr_(next_sequence_nr.fetch_add(1)) {}

void Node::set_next_edges(std::initializer_list<const Tensor*> inputs) {
  next_edges_.clear();
  next_edges_.reserve(inputs.size());
  for (const Tensor* t : inputs) next_edges_.push_back(gradient_edge(*t));
}

void Node::set_next_edges(const std::vector<Tensor>& inputs) {
  next_edges_.clear();
  next_edges_.reserve(inputs.size());
  for (const Tensor& t : inputs) next_edges_.push_back(gradient_edge(t));
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t->requires_grad()) return true;
  }
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) return true;
  }
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Edge{};
  const auto& impl = t.impl();
  if (impl->grad_fn) return Edge{impl->grad_fn, impl->output_nr};
  std::lock_guard<std::mutex> lock(impl->grad_mutex);
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl);
    impl->grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

void set_history(const Tensor& out, const std::shared_ptr<Node>& node, int output_nr) {
  out.impl()->grad_fn = node;
  out.impl()->output_nr = output_nr;
  out.impl()->requires_grad = true;
}

}  // namespace kdp::autograd
