#pragma once
/// \file
/// Reductions: over all elements, or along one dimension (keepdim keeps it with
/// size 1). sum, mean and max are differentiable; argmax is not.

#include <tuple>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// Sum of all elements (a scalar).
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, int dim, bool keepdim = false);
/// Mean of all elements (a scalar).
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, int dim, bool keepdim = false);
/// Largest value along `dim`; the gradient goes to the first largest element.
Tensor max(const Tensor& x, int dim, bool keepdim = false);
/// The largest values along `dim` and where they are (the first, as floats),
/// as torch::max(x, dim) returns them: auto [values, indices] = max_with_indices(x, 1).
std::tuple<Tensor, Tensor> max_with_indices(const Tensor& x, int dim, bool keepdim = false);
/// Index (as a float) of the first largest value along `dim`.
Tensor argmax(const Tensor& x, int dim, bool keepdim = false);
/// How many rows of logits [B, C] have their first largest value at the class
/// that `target` [B] gives: a scalar tensor on the device (no gradient), so a
/// training loop can add up its accuracy without reading anything back.
Tensor count_correct(const Tensor& logits, const Tensor& target);

}  // namespace kdp
