#pragma once
/// \file
/// Loss functions (PyTorch's semantics and names). Class targets are tensors of
/// class indices stored as floats (exact up to 2^24 classes).

#include "kdp/core/tensor.hpp"

namespace kdp {

enum class Reduction { None, Mean, Sum };

/// mean((input - target)^2); input and target must have one shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
/// mean(|input - target|); the gradient at 0 is 0, as PyTorch's.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
/// PyTorch's smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta
/// elsewhere (d = input - target; beta 0: the L1 loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::Mean, double beta = 1.0);
/// PyTorch's huber_loss: 0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta)
/// elsewhere (delta times smooth_l1_loss with beta = delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);

/// Cross entropy of logits [B, C] against class indices [B]: log-softmax and
/// negative log-likelihood fused, computed without overflow for large logits.
/// An index outside [0, C) is a ValueError naming the position and the value.
/// As PyTorch's, logits [B, C, d1, ...] take targets [B, d1, ...] (a
/// sequence's [B, V, T] against [B, T]); they are moved to [B d1 ..., C]
/// first, so logits [B, T, V] are cheaper as their own reshape to
/// [B T, V] against targets [B T], which is the same loss.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::Mean);

/// Negative log-likelihood of log-probabilities [B, C] against class indices [B].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                Reduction reduction = Reduction::Mean);

/// PyTorch's further options of cross_entropy and nll_loss.
struct ClassLossOptions {
  Reduction reduction = Reduction::Mean;
  /// A weight per class [C] (undefined: all 1): a row's loss is multiplied by
  /// its target's weight, and the mean divides by the sum of those weights.
  Tensor weight;
  /// Rows whose target is this index add nothing, to the sum and to the mean's
  /// divisor (their loss is 0 with Reduction::None).
  int64_t ignore_index = -100;
  /// cross_entropy only: the target distribution is (1 - s) one-hot + s / C,
  /// the smoothing term weighted by the class weights too, as in PyTorch.
  double label_smoothing = 0.0;

  /// Chained setters, one per option, to name each where it is set:
  /// ClassLossOptions{}.with_reduction(...).with_label_smoothing(...).
  ClassLossOptions& with_reduction(Reduction value) {
    reduction = std::move(value);
    return *this;
  }
  ClassLossOptions& with_weight(Tensor value) {
    weight = std::move(value);
    return *this;
  }
  ClassLossOptions& with_ignore_index(int64_t value) {
    ignore_index = value;
    return *this;
  }
  ClassLossOptions& with_label_smoothing(double value) {
    label_smoothing = value;
    return *this;
  }
};

/// cross_entropy with class weights, an ignored index and label smoothing.
/// Over an all-ignored batch the mean is NaN, as in PyTorch.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const ClassLossOptions& options);

/// nll_loss with class weights and an ignored index.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const ClassLossOptions& options);

}  // namespace kdp
