#pragma once
// oneDNN, where a build has it (CMake: KDP_ENABLE_ONEDNN): the library made
// for matrix products and convolutions on CPUs, AMX tiles and AVX-512 kernels
// chosen at run time. kdp calls it on host backends for bf16 products and for
// the convolution shapes where it measures faster than kdp's im2col path
// (docs/performance.md); onednn_absent.cpp answers for builds without it.
// Calls run on the calling thread's oneDNN stream with kdp's thread count.

#include <cstdint>

namespace kdp::ops_detail::onednn {

/// Whether this build has oneDNN.
bool available();

/// C (fp32, row-major, row length ldc) = alpha op(A) op(B) + beta C, with A
/// and B bf16 (row-major, row lengths lda and ldb) and fp32 accumulation;
/// op(A) is m x k, op(B) k x n. Host memory.
void matmul_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                 float* c, int64_t ldc);

}  // namespace kdp::ops_detail::onednn
