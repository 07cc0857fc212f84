#pragma once
/// \file
/// Dimensions moved, cut, added and broadcast, with PyTorch's functional
/// names and semantics. kdp's tensors are contiguous: where PyTorch returns a
/// strided view (permute, transpose, expand), these return a contiguous copy,
/// so contiguous() is the tensor itself. All differentiable. (reshape, slice,
/// chunk and clone are Tensor members, cat is in kdp/core/tensor.hpp.)

#include <cstdint>
#include <vector>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// torch.permute: dimension i of the result is dimension dims[i] of x; dims
/// is a permutation of x's dimensions (negative ones count from the end).
Tensor permute(const Tensor& x, const std::vector<int>& dims);

/// torch.transpose: dimensions dim0 and dim1 swapped.
Tensor transpose(const Tensor& x, int dim0, int dim1);

/// x itself: a kdp tensor is always contiguous (x.contiguous() in PyTorch).
Tensor contiguous(const Tensor& x);

/// torch.narrow: `length` entries of dimension `dim` from `start` (which
/// may be negative, counted from the end).
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);

/// torch.select: entry `index` of dimension `dim`, the dimension removed
/// (index may be negative).
Tensor select(const Tensor& x, int dim, int64_t index);

/// torch.unsqueeze: a dimension of size 1 inserted at `dim` (in
/// [-rank - 1, rank]).
Tensor unsqueeze(const Tensor& x, int dim);

/// torch.squeeze(x, dim): dimension `dim` removed where its size is 1; x
/// unchanged otherwise.
Tensor squeeze(const Tensor& x, int dim);

/// torch.expand: x broadcast to `sizes` (NumPy rules: dimensions of size 1
/// repeat, new ones are added in front; -1 keeps x's size). The gradient sums
/// over the repeats.
Tensor expand(const Tensor& x, const std::vector<int64_t>& sizes);

/// torch.split: pieces of `split_size` entries along `dim`, the last one
/// smaller where the size does not divide.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int dim = 0);

/// torch.split with sizes: pieces of these sizes along `dim`, which must sum
/// to its size.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim = 0);

}  // namespace kdp
