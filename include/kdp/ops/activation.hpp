#pragma once
/// \file
/// Activations, softmax and dropout. All differentiable.

#include "kdp/core/tensor.hpp"

namespace kdp {

Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, float negative_slope = 0.01f);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
/// The exact GELU, x * Phi(x), as PyTorch's default.
Tensor gelu(const Tensor& x);
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

}  // namespace kdp
