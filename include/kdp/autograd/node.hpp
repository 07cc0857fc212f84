#pragma once
/// \file
/// Node: one step of the graph that ops record as they run. A node knows how to
/// turn the gradients of its outputs into the gradients of its inputs (its
/// backward, written beside the op's forward) and where those go (its edges).

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/tensor.hpp"

namespace kdp::autograd {

class Node;

/// Where a gradient goes: output `input_nr` of `node`'s inputs, i.e. the
/// gradient buffer slot `input_nr` of `node`. An invalid edge drops it.
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
  bool valid() const { return node != nullptr; }
};

/// A tensor kept for backward: a detached alias (no reference cycle through the
/// graph) and the storage version it had, so that an in-place change made after
/// the forward is reported instead of silently giving wrong gradients.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  /// The saved tensor; throws StateError if it was released or modified in place.
  const Tensor& get(const Node& owner) const;
  void reset() { tensor_ = Tensor(); }
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
};

/// One recorded step of the graph and its backward.
class Node {
 public:
  Node(const Device& device, int num_outputs = 1);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The op's name, as in error messages ("kdp::linear").
  virtual const char* name() const = 0;
  /// Gradients of the inputs (one per edge, undefined for none) from the
  /// gradients of the outputs (one per output, undefined where none arrived).
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grad_outputs) = 0;
  /// Drops saved tensors once backward has used them.
  virtual void release_saved() {}

  int num_outputs() const { return num_outputs_; }
  const Device& device() const { return device_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }

  /// One edge per input (see gradient_edge).
  void set_next_edges(std::initializer_list<const Tensor*> inputs);
  void set_next_edges(const std::vector<Tensor>& inputs);
  void add_next_edge(Edge edge) { next_edges_.push_back(std::move(edge)); }

  /// Bookkeeping of the engine during one backward pass.
  struct EngineState {
    uint64_t run = 0;            // the backward pass that last visited the node
    int dependencies = 0;        // edges into this node not processed yet
    std::vector<Tensor> buffer;  // summed gradients of the outputs
    bool released = false;       // saved tensors dropped: no second backward
  };
  EngineState& engine_state() { return engine_; }

 private:
  Device device_;
  int num_outputs_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
  EngineState engine_;
};

/// Whether an op on these inputs must record a node: grad mode is on and one of
/// them requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

/// The edge a gradient for `t` flows along: its grad_fn's output slot, or the
/// accumulator of a leaf that requires grad, or an invalid edge.
Edge gradient_edge(const Tensor& t);

/// Records `node` as the maker of `out` (output slot `output_nr`).
void set_history(const Tensor& out, const std::shared_ptr<Node>& node, int output_nr = 0);

}  // namespace kdp::autograd
