#pragma once
// oneDNN, where a build has it (CMake: KDP_ENABLE_ONEDNN): the library made
// for matrix products and convolutions on CPUs, AMX tiles and AVX-512 kernels
// chosen at run time. kdp calls it on host backends for bf16 products and for
// the convolution shapes where it measures faster than kdp's im2col path
// (docs/performance.md); onednn_absent.cpp answers for builds without it.
// Calls run on the calling thread's oneDNN stream with kdp's thread count.

#include <cstddef>
#include <cstdint>

#include "kernels/conv_geometry.hpp"

namespace kdp::detail::onednn {

/// Whether this build has oneDNN.
bool available();
/// Whether oneDNN computes in bf16 on this CPU within cpu_isa(): from AVX-512
/// (natively from AVX512_BF16 and AMX).
bool supports_bf16();

/// C (fp32, row-major, row length ldc) = alpha op(A) op(B) + beta C, with A
/// and B bf16 (row-major, row lengths lda and ldb) and fp32 accumulation;
/// op(A) is m x k, op(B) k x n. Host memory. It runs on `threads` threads,
/// or kdp's thread count where that is 0 (1 from a thread that is itself
/// one of several splitting a job: the bits of C then depend on nothing but
/// the shape).
void matmul_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                 float* c, int64_t ldc, int threads = 0);

/// Whether oneDNN takes this convolution: one group, and padding on the far
/// side that the output size leaves non-negative.
bool conv_supported(const ConvGeometry& d);

/// y = x * w + bias (then max(y, 0) with `relu`), every tensor fp32 in
/// PyTorch's layouts (NCHW, OIHW; bias may be null); in `bf16`, x and w are
/// rounded to bf16 and the products accumulate in fp32. With `keep_x`, x in
/// the layout and precision oneDNN's kernels read is written there, for
/// conv_backward's weight gradient (conv_kept_input_bytes of memory).
void conv_forward(const ConvGeometry& d, bool bf16, bool relu, const float* x, const float* w,
                  const float* bias, float* y, void* keep_x = nullptr);
/// The bytes conv_forward(keep_x) writes: x as both the forward and the
/// weight gradient read it; 0 where they read it differently, or read the
/// user's x as it is (then there is nothing to keep).
size_t conv_kept_input_bytes(const ConvGeometry& d, bool bf16, bool relu, bool bias);

/// The input gradient gx (from gy and w) and the weight gradient gw (from x
/// and gy; kdp sums the bias gradient in fp32), either null when not wanted;
/// gy is reordered once for both where their kernels read the same layout.
/// With `kept_x` (from conv_forward's keep_x), x is read from there.
void conv_backward(const ConvGeometry& d, bool bf16, const float* gy, const float* w,
                   const float* x, float* gx, float* gw, const void* kept_x = nullptr);

}  // namespace kdp::detail::onednn
