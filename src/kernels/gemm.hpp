#pragma once
// The matrix products under linear, matmul and the convolutions, in either
// precision (kdp/core/precision.hpp): fp32, through kdp's small-GEMM kernel for
// small products on host backends or the BLAS; bf16, through oneDNN's AMX or
// AVX-512 kernels on CPUs, cuBLAS on GPUs, and elsewhere the fp32 GEMM of the
// bf16-rounded values (the same numbers, no faster).

#include <cstdint>

#include "kdp/core/precision.hpp"
#include "kdp/core/tensor.hpp"

namespace kdp::detail {

/// A matrix's values rounded to bf16, their 16 bits row after row in scratch
/// memory of the device. A product's node keeps its operands this way for the
/// backward pass (half the memory of fp32, and no second rounding).
struct Bf16Matrix {
  Tensor storage;  // holds the memory
  int64_t rows = 0, cols = 0;
  const uint16_t* data() const { return reinterpret_cast<const uint16_t*>(storage.data()); }
  bool defined() const { return storage.defined(); }
};

/// `m` rounded to bf16 (detail::to_bf16) on the device's instance.
Bf16Matrix to_bf16(const Device& device, ConstView2 m);

/// C = alpha op(A) op(B) + beta C on the device's instance in `precision`
/// (Auto is taken as fp32: autocast resolves it where it starts).
void gemm(const Device& device, const char* ta, const char* tb, float alpha, ConstView2 a,
          ConstView2 b, float beta, View2 c, Precision precision = autocast_precision());

/// C_i = alpha op(A_i) op(B_i) + beta C_i for i in [0, batch): A_i is the
/// a_rows x a_cols row-major matrix at a + i a_rows a_cols, B_i and C_i
/// alike (torch.bmm's contiguous operands): on GPUs the whole batch in one
/// launch (cuBLAS' strided-batched GEMM), on host backends each product as
/// gemm() makes it.
void batched_gemm(const Device& device, const char* ta, const char* tb, int64_t batch, float alpha,
                  const float* a, int64_t a_rows, int64_t a_cols, const float* b, int64_t b_rows,
                  int64_t b_cols, float beta, float* c, int64_t c_rows, int64_t c_cols,
                  Precision precision = autocast_precision());

/// C = alpha op(A) op(B) + beta C with bf16 operands and fp32 accumulation.
void gemm_bf16(const Device& device, bool trans_a, bool trans_b, float alpha, const Bf16Matrix& a,
               const Bf16Matrix& b, float beta, View2 c);

}  // namespace kdp::detail
