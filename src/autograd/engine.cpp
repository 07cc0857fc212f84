#include "kdp/autograd/engine.hpp"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <set>

#include "autograd/accumulate_grad.hpp"
#include "core/check.hpp"
#include "kdp/autograd/node.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/execution_context.hpp"
#include "kdp/core/runtime.hpp"
#include "kdp/core/trace.hpp"

namespace kdp {

namespace {

using autograd::Edge;
using autograd::Node;

std::atomic<uint64_t> next_run{1};

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};
using ReadyQueue = std::priority_queue<Node*, std::vector<Node*>, LaterFirst>;

// One backward pass: the nodes it reaches and their bookkeeping.
class GraphTask {
 public:
  GraphTask(const std::vector<Edge>& roots, std::vector<Tensor> root_grads, bool retain_graph)
      : run_(next_run.fetch_add(1)), retain_graph_(retain_graph) {
    discover(roots);
    std::map<int, Device> instances;
    for (Node* n : nodes_) instances.emplace(n->device().instance_id(), n->device());
    concurrent_ = instances.size() > 1 && compat::instances_can_be_concurrent();
    if (concurrent_) {
      for (auto& [id, device] : instances) worker_devices_.push_back(device);
    }
    for (size_t i = 0; i < roots.size(); ++i) {
      Node* n = roots[i].node.get();
      autograd::accumulate(n->engine_state().buffer[static_cast<size_t>(roots[i].input_nr)],
                           std::move(root_grads[i]), n->device());
    }
    for (const Edge& r : roots) {
      Node* n = r.node.get();
      if (n->engine_state().dependencies == 0 && pushed_roots_.insert(n).second) {
        queue_for(n).push(n);
      }
    }
  }

  void run() {
    if (!concurrent_) {
      run_serial();
      return;
    }
    // One worker per instance, each taking the ready nodes of its own
    // devices in the caller's execution context (as run_serial has it).
    const ExecutionContext context = ExecutionContext::current();
    std::vector<std::function<void()>> workers;
    for (const Device& device : worker_devices_) {
      workers.emplace_back([this, &context, id = device.instance_id()] {
        ExecutionScope scope(context);
        work(id);
      });
    }
    auto errors = Runtime::get().device_threads().run(workers, worker_devices_, true);
    if (error_) std::rethrow_exception(error_);
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }

 private:
  void discover(const std::vector<Edge>& roots) {
    std::vector<Node*> stack;
    auto visit = [&](Node* n) {
      auto& st = n->engine_state();
      KDP_CHECK(!st.released, StateError,
                "the graph through {} was already freed by an earlier backward; "
                "pass retain_graph = true to the first backward to go through it twice",
                n->name());
      if (st.run == run_) return false;
      st.run = run_;
      st.dependencies = 0;
      st.buffer.assign(static_cast<size_t>(n->num_outputs()), Tensor());
      nodes_.push_back(n);
      return true;
    };
    for (const Edge& r : roots) {
      if (visit(r.node.get())) stack.push_back(r.node.get());
    }
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges()) {
        if (!e.valid()) continue;
        Node* next = e.node.get();
        if (visit(next)) stack.push_back(next);
        next->engine_state().dependencies++;
      }
    }
  }

  ReadyQueue& queue_for(Node* n) { return queues_[concurrent_ ? n->device().instance_id() : 0]; }

  // Runs `n`'s backward and returns the gradients for its edges.
  std::vector<Tensor> execute(Node* n) {
    auto& st = n->engine_state();
    std::vector<Tensor> grads = std::move(st.buffer);
    st.buffer.clear();
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    std::vector<Tensor> out;
    if (any) {
      // "kdp::linear backward": apart from the forward op's region in tools
      // that sum regions by name.
      std::optional<trace::Region> region;
      std::string region_name;
      if (trace::tool_regions_here()) {
        region_name = std::string(n->name()) + " backward";
        region.emplace(region_name.c_str());
      }
      out = n->apply(grads);
      KDP_CHECK(out.size() == n->next_edges().size(), StateError,
                "{} returned {} gradients for {} inputs", n->name(), out.size(),
                n->next_edges().size());
    } else {
      out.resize(n->next_edges().size());
    }
    if (!retain_graph_) {
      n->release_saved();
      // Leaves' accumulators are reused by the next forward; only op nodes are spent.
      if (dynamic_cast<autograd::AccumulateGrad*>(n) == nullptr) st.released = true;
    }
    return out;
  }

  // Sends the gradients of `n`'s inputs along its edges and queues the nodes that
  // became ready. Kernels run on `exec`, the instance of the calling thread.
  void deliver(Node* n, std::vector<Tensor>& grads, const Device& exec) {
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* next = e.node.get();
      auto& st = next->engine_state();
      autograd::accumulate(st.buffer[static_cast<size_t>(e.input_nr)], std::move(grads[i]), exec);
      if (--st.dependencies == 0) queue_for(next).push(next);
    }
  }

  void run_serial() {
    autograd::NoGradGuard no_grad;
    ReadyQueue& q = queues_[0];
    while (!q.empty()) {
      Node* n = q.top();
      q.pop();
      std::vector<Tensor> grads = execute(n);
      deliver(n, grads, n->device());
    }
  }

  void work(int instance) {
    autograd::NoGradGuard no_grad;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_.wait(lock, [&] {
        return error_ || processed_ == nodes_.size() || !queues_[instance].empty();
      });
      if (error_ || processed_ == nodes_.size()) return;
      Node* n = queues_[instance].top();
      queues_[instance].pop();
      lock.unlock();
      std::vector<Tensor> grads;
      try {
        grads = execute(n);
      } catch (...) {
        lock.lock();
        if (!error_) error_ = std::current_exception();
        ready_.notify_all();
        return;
      }
      lock.lock();
      try {
        deliver(n, grads, n->device());
      } catch (...) {
        if (!error_) error_ = std::current_exception();
      }
      ++processed_;
      ready_.notify_all();
    }
  }

  uint64_t run_;
  bool retain_graph_;
  std::vector<Node*> nodes_;
  bool concurrent_ = false;
  std::vector<Device> worker_devices_;
  std::set<Node*> pushed_roots_;
  std::map<int, ReadyQueue> queues_;
  std::mutex mutex_;
  std::condition_variable ready_;
  size_t processed_ = 0;
  std::exception_ptr error_;
};

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
              bool retain_graph) {
  KDP_CHECK(grads.empty() || grads.size() == outputs.size(), ValueError,
            "{} gradients for {} outputs", grads.size(), outputs.size());
  std::vector<Edge> roots;
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    KDP_CHECK(out.defined(), StateError, "an output is undefined");
    KDP_CHECK(
        out.requires_grad(), StateError,
        "{} does not require grad and has no grad_fn: nothing leads back to a "
        "parameter (was it computed under NoGradGuard, or from tensors without requires_grad?)",
        out.describe());
    Tensor g;
    if (grads.empty() || !grads[i].defined()) {
      KDP_CHECK(out.numel() == 1, ShapeError,
                "a gradient can be implied only for a scalar output; {} has shape {} "
                "(reduce it with kdp::mean or kdp::sum, or pass its gradient)",
                out.describe(), out.shape().str());
      g = Tensor::ones(out.shape(), out.device());
    } else {
      g = grads[i];
      KDP_CHECK(g.shape() == out.shape(), ShapeError, "gradient of shape {} for output of shape {}",
                g.shape().str(), out.shape().str());
      KDP_CHECK(g.device() == out.device(), DeviceError, "gradient on {} for output on {}",
                g.device().str(), out.device().str());
      g = g.detach();
    }
    roots.push_back(autograd::gradient_edge(out));
    root_grads.push_back(std::move(g));
  }
  trace::Region region("kdp::autograd::backward");
  GraphTask task(roots, std::move(root_grads), retain_graph);
  task.run();
}

std::vector<std::shared_ptr<TensorImpl>> autograd::reachable_leaves(
    const std::vector<Tensor>& outputs) {
  std::vector<std::shared_ptr<TensorImpl>> leaves;
  std::set<const Node*> seen;
  std::vector<const Node*> stack;
  for (const Tensor& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    if (!out.grad_fn()) {
      leaves.push_back(out.impl());
      continue;
    }
    if (seen.insert(out.grad_fn().get()).second) stack.push_back(out.grad_fn().get());
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (const auto* acc = dynamic_cast<const autograd::AccumulateGrad*>(n)) {
      leaves.push_back(acc->leaf());
      continue;
    }
    for (const Edge& e : n->next_edges()) {
      if (e.valid() && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  return leaves;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  kdp::backward(*this, grad, retain_graph);
}

}  // namespace kdp
