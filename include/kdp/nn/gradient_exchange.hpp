#pragma once
/// \file
/// GradientExchange: what a training loop needs of a module that exchanges
/// gradients across ranks while backward runs (DistributedDataParallel, or a
/// wrapper of a user's own). Module::gradient_exchange() returns it, and the
/// Trainer asks a model for nothing else, so any such module trains the same.

namespace kdp::nn {

class Module;

/// The gradient exchange of a module: see the file's description.
class GradientExchange {
 public:
  virtual ~GradientExchange() = default;

  /// Whether backward exchanges gradients; off, it accumulates them locally
  /// (PyTorch's no_sync(), for all but the last micro-batch of a step).
  virtual bool exchanging() const = 0;
  virtual void set_exchanging(bool on) = 0;
  /// Waits for the exchanges launched so far.
  virtual void finish() = 0;
  /// Seconds spent waiting for exchanges that had not finished when backward
  /// did (communication not hidden behind computation), in total.
  virtual double comm_wait_seconds() const = 0;
  /// The module that computes on this rank alone: evaluation runs it, so that
  /// ranks with a batch more or less never wait for each other.
  virtual Module& local_module() = 0;
  /// Whether the gradients are views into the exchange's buffers, which
  /// zero_grad must zero rather than drop.
  virtual bool keeps_gradient_storage() const { return true; }

  /// While alive, backward accumulates locally; the previous state returns.
  class Pause {
   public:
    explicit Pause(GradientExchange& exchange)
        : exchange_(exchange), previous_(exchange.exchanging()) {
      exchange_.set_exchanging(false);
    }
    ~Pause() { exchange_.set_exchanging(previous_); }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    GradientExchange& exchange_;
    bool previous_;
  };
};

}  // namespace kdp::nn
