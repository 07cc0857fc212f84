#pragma once
/// \file
/// Matrix products through Kokkos Kernels GEMM.

#include "kdp/core/tensor.hpp"

namespace kdp {

/// torch.matmul: a [n, k] times b [k, m] = [n, m]; a 1-D operand is a row
/// (a) or a column (b) vector whose dimension leaves the result; operands of
/// 3 or more dimensions are batches of matrices over their leading
/// dimensions, broadcast against each other (NumPy rules), as
/// [..., n, k] times [..., k, m] = [..., n, m]. A batch times a matrix is one
/// product of the batch's stacked rows.
Tensor matmul(const Tensor& a, const Tensor& b);

/// torch.bmm: a [B, n, k] times b [B, k, m] = [B, n, m], one product per
/// batch entry.
Tensor bmm(const Tensor& a, const Tensor& b);

/// y = x W^T + b, fused: one GEMM forward (the bias is written first and the GEMM
/// adds onto it); backward is two GEMMs and a column sum. x is [..., in], weight
/// [out, in] (PyTorch's layout), bias [out] or undefined; y is [..., out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

/// relu(linear(x, weight, bias)) in fewer passes over memory: the GEMM writes
/// the output, one pass adds the bias and applies the ReLU; backward masks the
/// gradient and sums its columns for the bias in one pass before the two
/// GEMMs. Sequential runs a Linear followed by a ReLU through it.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kdp
