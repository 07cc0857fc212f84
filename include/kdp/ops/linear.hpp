#pragma once
/// \file
/// Matrix products through Kokkos Kernels GEMM.

#include "kdp/core/tensor.hpp"

namespace kdp {

/// a [n, k] times b [k, m] = [n, m].
Tensor matmul(const Tensor& a, const Tensor& b);

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
