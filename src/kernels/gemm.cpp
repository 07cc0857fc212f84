#include "kernels/gemm.hpp"

#include "core/parallel_for.hpp"
#include "core/tensor_kernels.hpp"
#include "kernels/fork_join.hpp"
#include "kernels/native/bf16.hpp"
#include "kernels/native/row_gemm.hpp"
#include "kernels/native/small_gemm.hpp"
#include "kernels/product_policy.hpp"
#include "kernels/vendor/onednn.hpp"

namespace kdp::detail {

namespace {

// C = beta C where there is nothing to multiply (an inner dimension of 0):
// Kokkos Kernels would leave C untouched.
void scale_only(const Device& device, float beta, View2 c) {
  View1 flat(c.data(), c.extent(0) * c.extent(1));
  if (beta == 0.0f) {
    fill(device, flat, 0.0f);
  } else {
    scale(device, flat, beta);
  }
}

// The fp32 product of the bf16 values (kdp's path where neither oneDNN nor
// cuBLAS takes them): the same rounding, an fp32 GEMM.
void gemm_bf16_portable(const Device& device, bool trans_a, bool trans_b, float alpha,
                        const Bf16Matrix& a, const Bf16Matrix& b, float beta, View2 c) {
  auto widen = [&](const Bf16Matrix& m) {
    Tensor wide = Tensor::empty(Shape{m.rows, m.cols}, device);
    View1 out = wide.flat();
    const uint16_t* bits = m.data();
    Kokkos::parallel_for(
        "kdp::gemm bf16 widen", range(device, m.rows * m.cols),
        KOKKOS_LAMBDA(const int64_t i) { out(i) = from_bf16(bits[i]); });
    return wide;
  };
  const Tensor wa = widen(a), wb = widen(b);
  gemm(device, trans_a ? "T" : "N", trans_b ? "T" : "N", alpha, wa.cmatrix(), wb.cmatrix(), beta, c,
       Precision::fp32);
}

// row_gemm over the threads the device and `policy` give (host_blocks), each
// on a block of C's columns (or of its rows, for a narrow C): every element's
// sum is the same whoever makes it, so the split leaves the bits as they are.
// `rows` is row_gemm or row_gemm_bf16.
using RowGemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                         const float*, int64_t, float, float*, int64_t);
void row_gemm_on_threads(const Device& device, const ProductPolicy& policy, RowGemm rows,
                         bool trans_a, bool trans_b, float alpha, ConstView2 a, ConstView2 b,
                         float beta, View2 c, size_t inner) {
  const auto m = static_cast<int64_t>(c.extent(0)), n = static_cast<int64_t>(c.extent(1));
  const auto k = static_cast<int64_t>(inner);
  const auto lda = static_cast<int64_t>(a.stride(0)), ldb = static_cast<int64_t>(b.stride(0));
  const auto ldc = static_cast<int64_t>(c.stride(0));
  const float *ad = a.data(), *bd = b.data();
  float* cd = c.data();
  const int threads = std::max(device.concurrency(), policy.threads());
  constexpr int64_t kWork = 1 << 20;  // multiply-adds below which one thread makes all
  if (threads <= 1 || m * n * std::max<int64_t>(k, 1) < kWork) {
    return rows(trans_a, trans_b, m, n, k, alpha, ad, lda, bd, ldb, beta, cd, ldc);
  }
  // Each thread's share of x, rounded up to a multiple of `to` (a tile's:
  // 12 rows is a whole number of tiles on every instruction set).
  const auto share = [&](int64_t x, int64_t to) {
    const int64_t per = (x + threads - 1) / threads;
    return (per + to - 1) / to * to;
  };
  if (n >= 64 * threads) {
    host_blocks(device, threads, n, share(n, 32), [=](int64_t j0, int64_t j1) {
      rows(trans_a, trans_b, m, j1 - j0, k, alpha, ad, lda, bd + (trans_b ? j0 * ldb : j0), ldb,
           beta, cd + j0, ldc);
    });
  } else {
    host_blocks(device, threads, m, share(m, 12), [=](int64_t i0, int64_t i1) {
      rows(trans_a, trans_b, i1 - i0, n, k, alpha, ad + (trans_a ? i0 : i0 * lda), lda, bd, ldb,
           beta, cd + i0 * ldc, ldc);
    });
  }
}

}  // namespace

Bf16Matrix to_bf16(const Device& device, ConstView2 m) {
  Bf16Matrix out;
  out.rows = static_cast<int64_t>(m.extent(0));
  out.cols = static_cast<int64_t>(m.extent(1));
  const int64_t n = out.rows * out.cols;
  out.storage = Tensor::empty(Shape{(n + 1) / 2}, device);
  auto* bits = reinterpret_cast<uint16_t*>(out.storage.data());
  const float* src = m.data();
  const int64_t cols = out.cols, ld = static_cast<int64_t>(m.stride(0));
  if constexpr (compat::launches_are_synchronous()) {
    // Host backends: row by row on the calling thread, with the CPU's widest
    // instructions (kernels finish before their launch returns: nothing to wait for).
    for (int64_t r = 0; r < out.rows; ++r) to_bf16_host(src + r * ld, bits + r * cols, cols);
  } else {
    Kokkos::parallel_for(
        "kdp::to_bf16", range(device, n), KOKKOS_LAMBDA(const int64_t i) {
          bits[i] = kdp::detail::to_bf16(src[(i / cols) * ld + i % cols]);
        });
  }
  return out;
}

void gemm_bf16(const Device& device, bool trans_a, bool trans_b, float alpha, const Bf16Matrix& a,
               const Bf16Matrix& b, float beta, View2 c) {
  const int64_t m = static_cast<int64_t>(c.extent(0)), n = static_cast<int64_t>(c.extent(1));
  const int64_t k = trans_a ? a.rows : a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(device, beta, c);
  const auto ldc = static_cast<int64_t>(c.stride(0));
  if constexpr (compat::gpu_backend()) {
    compat::gemm_bf16(device.blas(), trans_a, trans_b, m, n, k, alpha, a.data(), a.cols, b.data(),
                      b.cols, beta, c.data(), ldc);
  } else if (onednn::supports_bf16()) {
    device.fence("kdp::gemm_bf16 operands");  // oneDNN runs on its own threads
    onednn::matmul_bf16(trans_a, trans_b, m, n, k, alpha, a.data(), a.cols, b.data(), b.cols, beta,
                        c.data(), ldc);
  } else {
    gemm_bf16_portable(device, trans_a, trans_b, alpha, a, b, beta, c);
  }
}

void gemm(const Device& device, const char* ta, const char* tb, float alpha, ConstView2 a,
          ConstView2 b, float beta, View2 c, Precision precision) {
  const size_t inner = (ta[0] == 'N') ? a.extent(1) : a.extent(0);
  if (c.extent(0) == 0 || c.extent(1) == 0) return;
  if (inner == 0) return scale_only(device, beta, c);
  const bool trans_a = ta[0] == 'T', trans_b = tb[0] == 'T';
  if constexpr (compat::host_accessible_memory()) {
    // Reproducible mode's whole batches: a row's bits must not depend on the
    // batch around it.
    if (const ProductPolicy* policy = product_policy()) {
      device.fence("kdp::gemm row-independent operands");
      return row_gemm_on_threads(device, *policy,
                                 precision == Precision::bf16 ? row_gemm_bf16 : row_gemm, trans_a,
                                 trans_b, alpha, a, b, beta, c, inner);
    }
  }
  if (precision == Precision::bf16) {
    return gemm_bf16(device, trans_a, trans_b, alpha, to_bf16(device, a), to_bf16(device, b), beta,
                     c);
  }
  if constexpr (compat::host_accessible_memory()) {
    // Small products (a small model's layers) skip the BLAS's fixed costs.
    if (small_gemm_preferred() &&
        small_gemm(trans_a, trans_b, static_cast<int64_t>(c.extent(0)),
                   static_cast<int64_t>(c.extent(1)), static_cast<int64_t>(inner), alpha, a.data(),
                   static_cast<int64_t>(a.stride(0)), b.data(), static_cast<int64_t>(b.stride(0)),
                   beta, c.data(), static_cast<int64_t>(c.stride(0)))) {
      return;
    }
  }
  compat::gemm(device.blas(), ta, tb, alpha, a, b, beta, c);
}

void batched_gemm(const Device& device, const char* ta, const char* tb, int64_t batch, float alpha,
                  const float* a, int64_t a_rows, int64_t a_cols, const float* b, int64_t b_rows,
                  int64_t b_cols, float beta, float* c, int64_t c_rows, int64_t c_cols,
                  Precision precision) {
  const int64_t a_size = a_rows * a_cols, b_size = b_rows * b_cols, c_size = c_rows * c_cols;
  const bool trans_a = ta[0] == 'T', trans_b = tb[0] == 'T';
  const int64_t k = trans_a ? a_rows : a_cols;
  if constexpr (compat::gpu_backend()) {
    // GPUs: the whole batch in one launch of cuBLAS' strided-batched GEMM.
    if (batch > 1 && k > 0 && c_size > 0) {
      const bool bf16 = precision == Precision::bf16;
      Bf16Matrix ab, bb;  // the operands' bits, in bf16
      if (bf16) {
        ab = to_bf16(device, ConstView2(a, batch * a_rows, a_cols));
        bb = to_bf16(device, ConstView2(b, batch * b_rows, b_cols));
      }
      return compat::gemm_strided_batched(
          device.blas(), bf16, trans_a, trans_b, batch, c_rows, c_cols, k, alpha,
          bf16 ? static_cast<const void*>(ab.data()) : a, a_cols, a_size,
          bf16 ? static_cast<const void*>(bb.data()) : b, b_cols, b_size, beta, c, c_cols, c_size);
    }
  }
  for (int64_t i = 0; i < batch; ++i) {
    gemm(device, ta, tb, alpha, ConstView2(a + i * a_size, a_rows, a_cols),
         ConstView2(b + i * b_size, b_rows, b_cols), beta, View2(c + i * c_size, c_rows, c_cols),
         precision);
  }
}

}  // namespace kdp::detail
