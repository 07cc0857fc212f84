#pragma once
/// \file
/// Activations, softmax and dropout. All differentiable.

#include <cstdint>
#include <string>
#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp {

Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, float negative_slope = 0.01f);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
/// GELU as torch.nn.functional.gelu: with `approximate` "none" the exact
/// x * Phi(x), with "tanh" 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
/// Another word is a ValueError.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
/// exp(x) / sum(exp(x)) along `dim` (computed without overflow).
Tensor softmax(const Tensor& x, int dim = -1);
/// x - logsumexp(x) along `dim`.
Tensor log_softmax(const Tensor& x, int dim = -1);
/// Zeroes each element with probability p and scales the rest by 1 / (1 - p)
/// when `training`; the identity otherwise. The mask comes from the device's
/// generator and is recomputed in backward, not stored.
Tensor dropout(const Tensor& x, float p, bool training = true);

/// Zeroes whole channels of [N, C, H, W] (or [C, H, W]) with probability p in
/// training mode and scales the rest by 1 / (1 - p), as torch's dropout2d;
/// the channels' draws come from the device's generator, as dropout's do.
Tensor dropout2d(const Tensor& x, float p, bool training = true);

/// Dropout drawn per sample. While one lives on a thread, dropout() and
/// dropout2d() there draw row r's mask (the input's first dimension is the
/// rows) from (seed, keys[r], the call's ordinal since construction) instead
/// of the device's generator: a sample's mask is the same whichever batch,
/// rank or device it is in (the Trainer's reproducible mode keys rows by
/// step and sample index). An input with another row count is refused.
/// It is part of the thread's ExecutionContext, which parallel_apply and the
/// autograd engine carry into their threads.
class SampleDraws {
 public:
  SampleDraws(uint64_t seed, std::vector<uint64_t> keys);
  ~SampleDraws();
  SampleDraws(const SampleDraws&) = delete;
  SampleDraws& operator=(const SampleDraws&) = delete;

  /// The one alive in this thread's execution context (the innermost), or null.
  static SampleDraws* active();
  size_t rows() const { return keys_.size(); }
  /// The rows' seeds for the next dropout call.
  std::vector<uint64_t> next_call();

 private:
  uint64_t seed_;
  std::vector<uint64_t> keys_;
  uint64_t calls_ = 0;
  SampleDraws* outer_;
};

}  // namespace kdp
