#pragma once
/// \file
/// ExecutionContext: what the ops started on a thread depend on besides their
/// arguments (grad mode, autocast's precision, reproducible mode's per-sample
/// dropout draws and its product policy), kept as one object per thread.
/// Work handed to other threads carries it whole: parallel_apply gives each
/// replica's thread the caller's context, and the autograd engine gives its
/// per-device workers the context backward() was called in, as PyTorch's
/// ThreadLocalState does. A program that starts threads of its own does the
/// same:
///
///     const kdp::ExecutionContext context = kdp::ExecutionContext::current();
///     std::thread worker([&] {
///       kdp::ExecutionScope scope(context);
///       y = model->forward(x);   // in the caller's grad mode and precision
///     });

#include "kdp/core/precision.hpp"

namespace kdp {

class SampleDraws;

namespace detail {
class ProductPolicy;
}

/// One thread's state for the ops it starts. The guards that set a part of it
/// (NoGradGuard, autocast, SampleDraws, reproducible mode's shard pass) change
/// the calling thread's context for their lifetime.
struct ExecutionContext {
  /// Whether ops record the graph for backward (autograd::GradMode).
  bool grad_enabled = true;
  /// The precision of products and convolutions (kdp::autocast).
  Precision precision = Precision::fp32;
  /// Per-sample dropout draws (reproducible mode), or null.
  SampleDraws* sample_draws = nullptr;
  /// How products are made where the fastest kernel for the shape will not
  /// do (reproducible mode's row-independent products), or null.
  detail::ProductPolicy* products = nullptr;

  /// The calling thread's context.
  static ExecutionContext& current();
};

/// Installs a copy of `context` on the calling thread for its lifetime, then
/// restores the context the thread had before.
class ExecutionScope {
 public:
  explicit ExecutionScope(const ExecutionContext& context)
      : previous_(ExecutionContext::current()) {
    ExecutionContext::current() = context;
  }
  ~ExecutionScope() { ExecutionContext::current() = previous_; }
  ExecutionScope(const ExecutionScope&) = delete;
  ExecutionScope& operator=(const ExecutionScope&) = delete;

 private:
  ExecutionContext previous_;
};

}  // namespace kdp
