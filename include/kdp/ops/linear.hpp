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

}  // namespace kdp
