// scaled_dot_product_attention. On host memory, a head at a time: blocks of
// queries against every key they see, as products (HostRows: row_gemm in
// fp32, oneDNN in bf16), the softmax between them. On GPUs, one query row a
// work item forward (keys in blocks, a running max and sum), and backward two
// passes that recompute the scores from the saved log-sum-exp: one a query
// row (dq, and the row's dO . O), one a key row (dk, dv). No work item
// writes another's output, so the sums go in one fixed order and need no
// atomics, and the bits do not depend on the thread count.

#include "kdp/ops/attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu_isa.hpp"
#include "kdp/config.hpp"
#include "kdp/core/generator.hpp"
#include "kdp/core/threads.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/ops/activation.hpp"
#include "kernels/fork_join.hpp"
#include "kernels/gemm.hpp"
#include "kernels/native/bf16.hpp"
#include "kernels/native/dropout_row.hpp"
#include "kernels/native/host_kernels.hpp"
#include "kernels/native/row_gemm.hpp"
#include "kernels/native/vector_exp.hpp"
#include "kernels/vendor/onednn.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

namespace {

namespace math = compat::math;

constexpr int64_t kMaxHead = 256;  // D and Dv: a row's accumulator lives in registers/stack
constexpr int kKeyBlock = 32;      // keys scored at once in the forward pass

using Seeds = Kokkos::View<uint64_t*, MemSpace>;

// What every pass reads: the operands as [BH, T, D], [BH, S, D], [BH, S, Dv],
// the mask, the causal flag, the scale and the dropout draws.
struct Problem {
  const float* q;
  const float* k;
  const float* v;
  const float* mask;    // null: none
  int64_t mask_stride;  // 0 ([T, S]) or T * S (one per batch entry)
  int64_t bh, t, s, d, dv;
  float scale;
  bool causal;
  // Dropout: element (b, i, j) of batch entry b keeps where the draw of
  // seeds(b / per_seed) for counter base + (b mod per_seed) T S + i S + j is
  // at least threshold.
  bool dropout;
  uint32_t threshold;
  float keep_scale;
  Seeds seeds;
  int64_t per_seed;
  uint64_t base;
  float inf;  // +infinity, set on the host (kernels need no numeric traits)

  KOKKOS_INLINE_FUNCTION int64_t keys_for(int64_t i) const {
    return causal ? (i + 1 < s ? i + 1 : s) : s;
  }
  KOKKOS_INLINE_FUNCTION int64_t first_query(int64_t j) const { return causal ? j : 0; }
  KOKKOS_INLINE_FUNCTION float score(int64_t b, int64_t i, int64_t j) const {
    const float* qi = q + (b * t + i) * d;
    const float* kj = k + (b * s + j) * d;
    float dot = 0.0f;
    for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
    float sc = dot * scale;
    if (mask != nullptr) sc += mask[b * mask_stride + i * s + j];
    return sc;
  }
  // The factor dropout gives weight (b, i, j): 0 or 1 / (1 - p).
  KOKKOS_INLINE_FUNCTION float kept(int64_t b, int64_t i, int64_t j) const {
    if (!dropout) return 1.0f;
    const random::Stream stream(seeds(b / per_seed));
    const uint64_t counter = base + static_cast<uint64_t>(((b % per_seed) * t + i) * s + j);
    return stream.at_least(counter, threshold) ? keep_scale : 0.0f;
  }
};

// Forward for query row r = b T + i: out[r, :] and lse[r] (+inf where every
// key is masked out: its weights are then exp(-inf) = 0 in backward too).
struct ForwardRows {
  Problem p;
  float* out;
  float* lse;
  KOKKOS_INLINE_FUNCTION void operator()(const int64_t r) const {
    const int64_t b = r / p.t, i = r % p.t;
    float acc[kMaxHead];
    for (int64_t c = 0; c < p.dv; ++c) acc[c] = 0.0f;
    const float neg_inf = -p.inf;
    float m = neg_inf, l = 0.0f;
    const int64_t keys = p.keys_for(i);
    float sc[kKeyBlock];
    for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
      const int64_t n = keys - j0 < kKeyBlock ? keys - j0 : kKeyBlock;
      float block_max = neg_inf;
      for (int64_t u = 0; u < n; ++u) {
        sc[u] = p.score(b, i, j0 + u);
        block_max = sc[u] > block_max ? sc[u] : block_max;
      }
      if (block_max == neg_inf) continue;
      if (block_max > m) {
        const float c = math::exp(m - block_max);  // 0 for the first block
        l *= c;
        for (int64_t e = 0; e < p.dv; ++e) acc[e] *= c;
        m = block_max;
      }
      for (int64_t u = 0; u < n; ++u) {
        const float w = math::exp(sc[u] - m);
        l += w;
        const float wd = w * p.kept(b, i, j0 + u);
        if (wd == 0.0f) continue;
        const float* vj = p.v + (b * p.s + j0 + u) * p.dv;
        for (int64_t e = 0; e < p.dv; ++e) acc[e] += wd * vj[e];
      }
    }
    float* o = out + r * p.dv;
    if (l == 0.0f) {
      for (int64_t e = 0; e < p.dv; ++e) o[e] = 0.0f;
      lse[r] = p.inf;
      return;
    }
    const float inv = 1.0f / l;
    for (int64_t e = 0; e < p.dv; ++e) o[e] = acc[e] * inv;
    lse[r] = m + math::log(l);
  }
};

// Backward for query row r: delta[r] = dO[r] . O[r], and
// dq[r] = scale sum_j P_rj (dP_rj - delta[r]) k_j with dP_rj = kept dO[r] . v_j.
struct QueryRows {
  Problem p;
  const float* dout;
  const float* out;
  const float* lse;
  float* delta;
  float* dq;  // null: not wanted
  KOKKOS_INLINE_FUNCTION void operator()(const int64_t r) const {
    const int64_t b = r / p.t, i = r % p.t;
    const float* go = dout + r * p.dv;
    const float* o = out + r * p.dv;
    float dl = 0.0f;
    for (int64_t e = 0; e < p.dv; ++e) dl += go[e] * o[e];
    delta[r] = dl;
    if (dq == nullptr) return;
    float acc[kMaxHead];
    for (int64_t c = 0; c < p.d; ++c) acc[c] = 0.0f;
    const float lr = lse[r];
    const int64_t keys = p.keys_for(i);
    for (int64_t j = 0; j < keys; ++j) {
      const float w = math::exp(p.score(b, i, j) - lr);
      if (w == 0.0f) continue;
      const float* vj = p.v + (b * p.s + j) * p.dv;
      float dp = 0.0f;
      for (int64_t e = 0; e < p.dv; ++e) dp += go[e] * vj[e];
      const float ds = w * (dp * p.kept(b, i, j) - dl);
      const float* kj = p.k + (b * p.s + j) * p.d;
      for (int64_t c = 0; c < p.d; ++c) acc[c] += ds * kj[c];
    }
    float* g = dq + r * p.d;
    for (int64_t c = 0; c < p.d; ++c) g[c] = acc[c] * p.scale;
  }
};

// Backward for key row r = b S + j: dv[r] = sum_i kept P_ij dO[i] and
// dk[r] = scale sum_i P_ij (dP_ij - delta[i]) q_i.
struct KeyRows {
  Problem p;
  const float* dout;
  const float* lse;
  const float* delta;
  float* dk;  // null: not wanted
  float* dv;  // null: not wanted
  KOKKOS_INLINE_FUNCTION void operator()(const int64_t r) const {
    const int64_t b = r / p.s, j = r % p.s;
    float ak[kMaxHead], av[kMaxHead];
    for (int64_t c = 0; c < p.d; ++c) ak[c] = 0.0f;
    for (int64_t e = 0; e < p.dv; ++e) av[e] = 0.0f;
    const float* vj = p.v + r * p.dv;
    for (int64_t i = p.first_query(j); i < p.t; ++i) {
      const int64_t qr = b * p.t + i;
      const float w = math::exp(p.score(b, i, j) - lse[qr]);
      if (w == 0.0f) continue;
      const float* go = dout + qr * p.dv;
      const float keep = p.kept(b, i, j);
      if (dv != nullptr && keep != 0.0f) {
        const float wd = w * keep;
        for (int64_t e = 0; e < p.dv; ++e) av[e] += wd * go[e];
      }
      if (dk != nullptr) {
        float dp = 0.0f;
        for (int64_t e = 0; e < p.dv; ++e) dp += go[e] * vj[e];
        const float ds = w * (dp * keep - delta[qr]);
        const float* qi = p.q + qr * p.d;
        for (int64_t c = 0; c < p.d; ++c) ak[c] += ds * qi[c];
      }
    }
    if (dk != nullptr) {
      for (int64_t c = 0; c < p.d; ++c) dk[r * p.d + c] = ak[c] * p.scale;
    }
    if (dv != nullptr) {
      for (int64_t e = 0; e < p.dv; ++e) dv[r * p.dv + e] = av[e];
    }
  }
};

// f(row) for every row in [0, n) as a Kokkos kernel on the device (GPUs: a
// row a thread).
template <class F>
void for_rows(const char* label, const Device& device, int64_t n, const F& f) {
  if (n > 0) Kokkos::parallel_for(label, kdp::detail::range(device, n), f);
}

// The element-wise passes over a tile of scores (rows x n, row length ld),
// compiled at each instruction set's width (KDP_HOST_KERNEL) with the same
// operations in the same order in each: the same bits on every CPU.

// e^(s - shift[r]) in place, 0 where the difference is -inf (a key masked
// out, or a row without keys: shift +inf).
KDP_ALWAYS_INLINE void exp_rows_body(float* __restrict s, int64_t rows, int64_t n, int64_t ld,
                                     const float* __restrict shift, float neg_inf) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    const float sh = shift[r];
    for (int64_t c = 0; c < n; ++c) {
      const float x = row[c] - sh;
      const float e = kdp::detail::vector_exp(x);
      row[c] = x == neg_inf ? 0.0f : e;
    }
  }
}
KDP_HOST_KERNEL(exp_rows, exp_rows_body,
                (float* s, int64_t rows, int64_t n, int64_t ld, const float* shift, float neg_inf),
                (s, rows, n, ld, shift, neg_inf))

// top[r] = max(top[r], the row's largest score): 16 lanes, then the lanes.
KDP_ALWAYS_INLINE void row_max_body(const float* __restrict s, int64_t rows, int64_t n, int64_t ld,
                                    float* __restrict top) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * ld;
    float lane[16];
    for (int k = 0; k < 16; ++k) lane[k] = top[r];
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
      for (int k = 0; k < 16; ++k) lane[k] = row[c + k] > lane[k] ? row[c + k] : lane[k];
    }
    float m = top[r];
    for (int k = 0; k < 16; ++k) m = lane[k] > m ? lane[k] : m;
    for (; c < n; ++c) m = row[c] > m ? row[c] : m;
    top[r] = m;
  }
}
KDP_HOST_KERNEL(row_max, row_max_body,
                (const float* s, int64_t rows, int64_t n, int64_t ld, float* top),
                (s, rows, n, ld, top))

// sums[r] = the row's sum: 16 lanes of partial sums, added in one order.
KDP_ALWAYS_INLINE void row_sums_body(const float* __restrict s, int64_t rows, int64_t n, int64_t ld,
                                     float* __restrict sums) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * ld;
    float lane[16] = {};
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
      for (int k = 0; k < 16; ++k) lane[k] += row[c + k];
    }
    for (int k = 0; c < n; ++c, ++k) lane[k] += row[c];
    float total = 0.0f;
    for (int k = 0; k < 16; ++k) total += lane[k];
    sums[r] = total;
  }
}
KDP_HOST_KERNEL(row_sums, row_sums_body,
                (const float* s, int64_t rows, int64_t n, int64_t ld, float* sums),
                (s, rows, n, ld, sums))

// dp[r, c] = w[r, c] (dp[r, c] - delta[r]): the scores' gradient dS.
KDP_ALWAYS_INLINE void score_grads_body(float* __restrict dp, const float* __restrict w,
                                        int64_t rows, int64_t n, int64_t ld,
                                        const float* __restrict delta) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dp + r * ld;
    const float* x = w + r * ld;
    const float dl = delta[r];
    for (int64_t c = 0; c < n; ++c) d[c] = x[c] * (d[c] - dl);
  }
}
KDP_HOST_KERNEL(score_grads, score_grads_body,
                (float* dp, const float* w, int64_t rows, int64_t n, int64_t ld,
                 const float* delta),
                (dp, w, rows, n, ld, delta))

// The additive mask and the causal mask on the scores s[r, c] (rows x n,
// row length ld) of queries i0 + r and keys c: -inf where a key is hidden.
void mask_tile(const Problem& p, int64_t b, int64_t i0, int64_t rows, int64_t n, int64_t ld,
               float* s) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    if (p.mask != nullptr) {
      const float* m = p.mask + b * p.mask_stride + (i0 + r) * p.s;
      for (int64_t c = 0; c < n; ++c) row[c] += m[c];
    }
    if (p.causal) {
      for (int64_t c = i0 + r + 1; c < n; ++c) row[c] = -p.inf;
    }
  }
}

// keep[r, c] (rows x n, row length ld) = the dropout factor of (query i0 + r,
// key c), with dropout.
void keep_tile(const Problem& p, int64_t b, int64_t i0, int64_t rows, int64_t n, int64_t ld,
               float* keep) {
  if (!p.dropout) return;
  const random::Stream stream(p.seeds(b / p.per_seed));
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t c0 = p.base + static_cast<uint64_t>(((b % p.per_seed) * p.t + i0 + r) * p.s);
    kdp::detail::dropout_factors(keep + r * ld, n, c0, stream, p.threshold, p.keep_scale);
  }
}

// x[r, c] *= keep[r, c] over a tile (rows x n, row length ld), with dropout.
void drop_tile(const Problem& p, float* x, const float* keep, int64_t rows, int64_t n, int64_t ld) {
  if (!p.dropout) return;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) x[r * ld + c] *= keep[r * ld + c];
  }
}

// The keys query block [i0, i0 + rows) sees: all, or up to its last row.
int64_t key_end(const Problem& p, int64_t i0, int64_t rows) {
  return p.causal ? std::min(p.s, i0 + rows) : p.s;
}

// f(w) for every block w in [0, n) on the rank's threads.
template <class F>
void for_blocks(const Device& device, int64_t n, const F& f) {
  if (n <= 0) return;
  const int threads = std::max(1, blas_threads());
  kdp::detail::host_blocks(device, threads, n, 1, [&f](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) f(w);
  });
}

// delta[r] = dO[r] . O[r] for every query row, on host memory.
void host_deltas(const Device& device, const Problem& p, const float* dout, const float* out,
                 float* delta) {
  const int64_t rows = p.bh * p.t, dv = p.dv;
  for_blocks(device, (rows + 255) / 256, [=](int64_t w) {
    for (int64_t r = w * 256; r < std::min(rows, (w + 1) * 256); ++r) {
      float d = 0.0f;
      for (int64_t e = 0; e < dv; ++e) d += dout[r * dv + e] * out[r * dv + e];
      delta[r] = d;
    }
  });
}

// Host memory: a block of kRows queries meets every key it sees in one
// product (its scores, rows x keys in fp32: memory grows with T, never with
// T x T), and the softmax runs in fp32 on the whole rows. The products take
// fp32 operands on row_gemm (T = float) or, under bf16 autocast on a CPU whose
// bf16 products outrun its fp32 ones (attention_path), bf16 operands (the
// operands, the weights, dO and dS rounded) with fp32 sums on oneDNN's AMX or
// AVX512_BF16 kernels (T = uint16_t, the bits). A head is one thread's work,
// its products on that thread alone and its key and value gradients summed
// over the query blocks in order: the bits depend on the shapes, not on the
// thread count or the batch. Forward makes two products a block, backward
// five (the scores again, dP, dq, dk, dv).
constexpr int64_t kRows = 128;
// Fewer keys than this and oneDNN's calls cost more than they save: the
// operands are rounded to bf16 and the fp32 products compute with them.
constexpr int64_t kBf16MinKeys = 128;

template <class T>
struct HostRows {
  static constexpr bool bf16 = std::is_same_v<T, uint16_t>;
  Problem p;
  const T* q;  // [BH, T, D]
  const T* k;  // [BH, S, D]
  const T* v;  // [BH, S, Dv]

  // A worker's scratch: the scores and dP (rows x S in fp32 each), with
  // dropout its factors, and in bf16 the weights and then dS as products
  // read them.
  struct Scratch {
    float *s, *dp, *keep;
    uint16_t* bits;
  };
  // The row length of a block's tiles with n keys: n, or in fp32 n rounded
  // up to 16 floats and 16 more where that is a multiple of 128. Rows a
  // multiple of 512 bytes apart share a few sets of the L1 cache: row_gemm
  // then packs the weights and dS where dv and dk read them transposed, and
  // reads them in place otherwise.
  static int64_t ld(int64_t n) {
    if constexpr (bf16) return n;
    const int64_t up = (n + 15) / 16 * 16;
    return up % 128 == 0 ? up + 16 : up;
  }
  int64_t tile() const { return kRows * ld(p.s); }
  int64_t fp32_tiles() const { return p.dropout ? 3 : 2; }
  int64_t scratch_floats() const { return fp32_tiles() * tile() + (bf16 ? (tile() + 1) / 2 : 0); }
  Scratch scratch(float* base) const {
    float* keep = p.dropout ? base + 2 * tile() : nullptr;
    auto* bits = reinterpret_cast<uint16_t*>(base + fp32_tiles() * tile());
    return {base, base + tile(), keep, bits};
  }
  // A tile (rows x n, row length n) as the products read it: itself, or its
  // bits in `bits`.
  static const T* operand(const float* x, uint16_t* bits, int64_t size) {
    if constexpr (bf16) {
      kdp::detail::to_bf16_host(x, bits, size);
      return bits;
    } else {
      (void)bits;
      (void)size;
      return x;
    }
  }
  // One product on this thread: C = alpha op(A) op(B) + beta C.
  static void product(bool ta, bool tb, int64_t m, int64_t n, int64_t kk, float alpha, const T* a,
                      int64_t lda, const T* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    if constexpr (bf16) {
      kdp::detail::onednn::matmul_bf16(ta, tb, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc, 1);
    } else {
      kdp::detail::row_gemm(ta, tb, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc);
    }
  }
  // s[r, c] (row length ld(n)) = scale q_(i0+r) . k_c + mask, -inf where hidden.
  void scores(int64_t b, int64_t i0, int64_t rows, int64_t n, float* s) const {
    product(false, true, rows, n, p.d, p.scale, q + (b * p.t + i0) * p.d, p.d, k + b * p.s * p.d,
            p.d, 0.0f, s, ld(n));
    mask_tile(p, b, i0, rows, n, ld(n), s);
  }
  void forward(int64_t b, float* work, float* out, float* lse) const;
  void backward(int64_t b, float* work, const T* dout, const float* lse, const float* delta,
                float* dq, float* dk, float* dv) const;
  // f(b, work) for every head b on the rank's threads, each thread with its
  // own scratch of scratch_floats().
  template <class F>
  void for_heads(const Device& device, const F& f) const;
};

template <class T>
template <class F>
void HostRows<T>::for_heads(const Device& device, const F& f) const {
  const int64_t workers = std::min<int64_t>(std::max(1, blas_threads()), p.bh);
  const Tensor slab = Tensor::empty(Shape{workers * scratch_floats()}, device);
  float* base = slab.data();
  for_blocks(device, workers, [&](int64_t w) {
    for (int64_t b = w * p.bh / workers; b < (w + 1) * p.bh / workers; ++b) {
      f(b, base + w * scratch_floats());
    }
  });
}

// Head b's output and log-sum-exp, a query block at a time.
template <class T>
void HostRows<T>::forward(int64_t b, float* work, float* out, float* lse) const {
  const Scratch w = scratch(work);
  float top[kRows], shift[kRows], sums[kRows];
  for (int64_t i0 = 0; i0 < p.t; i0 += kRows) {
    const int64_t rows = std::min(kRows, p.t - i0), n = key_end(p, i0, rows);
    const int64_t first = b * p.t + i0;
    if (n == 0) {  // no keys at all: zeros, and no gradient
      std::fill(out + first * p.dv, out + (first + rows) * p.dv, 0.0f);
      std::fill(lse + first, lse + first + rows, p.inf);
      continue;
    }
    const int64_t l = ld(n);
    scores(b, i0, rows, n, w.s);
    std::fill(top, top + rows, -p.inf);
    row_max(w.s, rows, n, l, top);
    // A row without a key shifts by +inf: its weights are 0.
    for (int64_t r = 0; r < rows; ++r) shift[r] = top[r] == -p.inf ? p.inf : top[r];
    exp_rows(w.s, rows, n, l, shift, -p.inf);
    row_sums(w.s, rows, n, l, sums);
    keep_tile(p, b, i0, rows, n, l, w.keep);
    drop_tile(p, w.s, w.keep, rows, n, l);
    float* o = out + first * p.dv;
    product(false, false, rows, p.dv, n, 1.0f, operand(w.s, w.bits, rows * l), l,
            v + b * p.s * p.dv, p.dv, 0.0f, o, p.dv);
    for (int64_t r = 0; r < rows; ++r) {
      const bool none = sums[r] == 0.0f;
      const float inv = none ? 0.0f : 1.0f / sums[r];
      for (int64_t e = 0; e < p.dv; ++e) o[r * p.dv + e] *= inv;
      lse[first + r] = none ? p.inf : top[r] + math::log(sums[r]);
    }
  }
}

// Head b's gradients: per query block the weights P again, dP = kept dO V^T,
// dS = P (dP - delta); dq = scale dS K, and over the blocks in order
// dv += (kept P)^T dO and dk += scale dS^T Q.
template <class T>
void HostRows<T>::backward(int64_t b, float* work, const T* dout, const float* lse,
                           const float* delta, float* dq, float* dk, float* dv) const {
  const Scratch w = scratch(work);
  if (dk != nullptr) std::fill(dk + b * p.s * p.d, dk + (b + 1) * p.s * p.d, 0.0f);
  if (dv != nullptr) std::fill(dv + b * p.s * p.dv, dv + (b + 1) * p.s * p.dv, 0.0f);
  for (int64_t i0 = 0; i0 < p.t; i0 += kRows) {
    const int64_t rows = std::min(kRows, p.t - i0), n = key_end(p, i0, rows);
    const int64_t first = b * p.t + i0;
    if (n == 0) {
      if (dq != nullptr) std::fill(dq + first * p.d, dq + (first + rows) * p.d, 0.0f);
      continue;
    }
    const int64_t l = ld(n);
    scores(b, i0, rows, n, w.s);
    exp_rows(w.s, rows, n, l, lse + first, -p.inf);
    product(false, true, rows, n, p.dv, 1.0f, dout + first * p.dv, p.dv, v + b * p.s * p.dv, p.dv,
            0.0f, w.dp, l);
    keep_tile(p, b, i0, rows, n, l, w.keep);
    drop_tile(p, w.dp, w.keep, rows, n, l);
    score_grads(w.dp, w.s, rows, n, l, delta + first);
    if (dv != nullptr) {
      drop_tile(p, w.s, w.keep, rows, n, l);
      product(true, false, n, p.dv, rows, 1.0f, operand(w.s, w.bits, rows * l), l,
              dout + first * p.dv, p.dv, 1.0f, dv + b * p.s * p.dv, p.dv);
    }
    if (dq == nullptr && dk == nullptr) continue;
    const T* ds = operand(w.dp, w.bits, rows * l);
    if (dq != nullptr) {
      product(false, false, rows, p.d, n, p.scale, ds, l, k + b * p.s * p.d, p.d, 0.0f,
              dq + first * p.d, p.d);
    }
    if (dk != nullptr) {
      product(true, false, n, p.d, rows, p.scale, ds, l, q + first * p.d, p.d, 1.0f,
              dk + b * p.s * p.d, p.d);
    }
  }
}

// x with every value rounded to bf16 (still fp32): what a product with bf16
// operands reads, for the paths that compute it in fp32.
struct RoundToBf16 {
  const float* src;
  float* dst;
  KOKKOS_INLINE_FUNCTION void operator()(const int64_t i) const {
    dst[i] = kdp::detail::round_to_bf16(src[i]);
  }
};
Tensor rounded_to_bf16(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.device());
  if constexpr (compat::launches_are_synchronous()) {
    kdp::detail::round_to_bf16_host(x.data(), out.data(), x.numel());
    return out;
  }
  for_rows("kdp::scaled_dot_product_attention bf16", x.device(), x.numel(),
           RoundToBf16{x.data(), out.data()});
  return out;
}

// How a call computes: fp32; bf16 on oneDNN's kernels (HostRows<uint16_t>); or the
// fp32 kernels on operands (and dO) rounded to bf16.
enum class AttentionPath { fp32, bf16, rounded };

// Which path a call under `precision` takes: the choice depends on the
// device, the CPU and T, S, D, never on the batch.
AttentionPath attention_path(const Problem& p, Precision precision) {
  if (precision != Precision::bf16) return AttentionPath::fp32;
  // oneDNN's bf16 products outrun row_gemm's fp32 ones on AMX tiles and on
  // AMD's AVX512_BF16 (twice its rate on attention's shapes on Zen 4); on
  // Intel's AVX512_BF16 without AMX they multiplied at about 0.7x its rate
  // (docs/performance.md).
  const bool blocks = compat::host_accessible_memory() && KDP_HAVE_ONEDNN &&
                      kdp::detail::bf16_dots_outrun_fp32() && p.s >= kBf16MinKeys;
  return blocks ? AttentionPath::bf16 : AttentionPath::rounded;
}

// The operands as backward reads them: fp32 tensors, or their bf16 bits.
struct AttentionSaved {
  AttentionPath path = AttentionPath::fp32;
  Tensor q, k, v;  // fp32 and rounded: the operands the kernels read
  kdp::detail::Bf16Matrix qb, kb, vb;
  Shape q_shape, k_shape, v_shape;
};

class AttentionNode : public autograd::Node {
 public:
  AttentionNode(const Problem& p, const AttentionSaved& in, const Tensor& mask, const Tensor& out,
                const Tensor& lse)
      : Node(out.device()),
        p_(p),
        path_(in.path),
        q_(in.q.defined() ? autograd::SavedTensor(in.q) : autograd::SavedTensor()),
        k_(in.k.defined() ? autograd::SavedTensor(in.k) : autograd::SavedTensor()),
        v_(in.v.defined() ? autograd::SavedTensor(in.v) : autograd::SavedTensor()),
        qb_(in.qb),
        kb_(in.kb),
        vb_(in.vb),
        shapes_{in.q_shape, in.k_shape, in.v_shape},
        out_(out),
        mask_(mask.defined() ? mask.detach() : Tensor()),
        lse_(lse) {}
  const char* name() const override { return "kdp::scaled_dot_product_attention"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Problem p = p_;
    const Tensor& out = out_.get(*this);
    p.mask = mask_.defined() ? mask_.data() : nullptr;
    Tensor g = path_ == AttentionPath::rounded ? rounded_to_bf16(grads[0]) : grads[0];
    Tensor gs[3];
    for (int i = 0; i < 3; ++i) {
      if (next_edges()[size_t(i)].valid()) gs[i] = Tensor::empty(shapes_[i], device());
    }
    Tensor delta = Tensor::empty(Shape{p.bh * p.t}, device());
    float* dq = gs[0].defined() ? gs[0].data() : nullptr;
    float* dk = gs[1].defined() ? gs[1].data() : nullptr;
    float* dv = gs[2].defined() ? gs[2].data() : nullptr;
    if (path_ == AttentionPath::bf16) {
      host_deltas(device(), p, g.data(), out.data(), delta.data());
      const kdp::detail::Bf16Matrix gb =
          kdp::detail::to_bf16(device(), g.cmatrix(p.bh * p.t, p.dv));
      const HostRows<uint16_t> h{p, qb_.data(), kb_.data(), vb_.data()};
      h.for_heads(device(), [&](int64_t b, float* work) {
        h.backward(b, work, gb.data(), lse_.data(), delta.data(), dq, dk, dv);
      });
    } else {
      p.q = q_.get(*this).data();
      p.k = k_.get(*this).data();
      p.v = v_.get(*this).data();
      fp32_backward(p, g, out, delta, dq, dk, dv);
    }
    device().fence("kdp::scaled_dot_product_attention backward");
    return {gs[0], gs[1], gs[2]};
  }
  void release_saved() override {
    q_.reset();
    k_.reset();
    v_.reset();
    qb_ = kb_ = vb_ = kdp::detail::Bf16Matrix();
    out_.reset();
    mask_ = lse_ = Tensor();
  }

 private:
  void fp32_backward(const Problem& p, const Tensor& g, const Tensor& out, const Tensor& delta,
                     float* dq, float* dk, float* dv) const {
    if constexpr (compat::host_accessible_memory()) {
      host_deltas(device(), p, g.data(), out.data(), delta.data());
      const HostRows<float> h{p, p.q, p.k, p.v};
      h.for_heads(device(), [&](int64_t b, float* work) {
        h.backward(b, work, g.data(), lse_.data(), delta.data(), dq, dk, dv);
      });
    } else {
      for_rows("kdp::scaled_dot_product_attention backward q", device(), p.bh * p.t,
               QueryRows{p, g.data(), out.data(), lse_.data(), delta.data(), dq});
      if (dk != nullptr || dv != nullptr) {
        for_rows("kdp::scaled_dot_product_attention backward kv", device(), p.bh * p.s,
                 KeyRows{p, g.data(), lse_.data(), delta.data(), dk, dv});
      }
    }
  }

  Problem p_;
  AttentionPath path_;
  autograd::SavedTensor q_, k_, v_;
  kdp::detail::Bf16Matrix qb_, kb_, vb_;
  Shape shapes_[3];
  autograd::SavedTensor out_;
  Tensor mask_, lse_;
};

std::vector<int64_t> leading_dims(const Tensor& x) {
  std::vector<int64_t> dims = x.shape().to_vector();
  dims.resize(dims.size() - 2);
  return dims;
}

// The checked shapes of q [..., T, D], k [..., S, D] and v [..., S, Dv], the
// scale and the causal flag (no mask, no dropout yet).
Problem attention_problem(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& o) {
  check_defined(op, q, "query");
  check_defined(op, k, "key");
  check_defined(op, v, "value");
  KDP_CHECK_FOR(op, q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError,
                "query {}, key {} and value {} need the same number of dimensions, at least 2 "
                "([..., T, D], [..., S, D], [..., S, Dv])",
                q.shape().str(), k.shape().str(), v.shape().str());
  KDP_CHECK_FOR(op,
                leading_dims(q) == leading_dims(k) && leading_dims(q) == leading_dims(v) &&
                    k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2),
                ShapeError,
                "query {}, key {} and value {} do not fit [..., T, D], [..., S, D], [..., S, Dv] "
                "with the same leading dimensions",
                q.shape().str(), k.shape().str(), v.shape().str());
  check_same_device(op, q, "query", k, "key");
  check_same_device(op, q, "query", v, "value");
  Problem p{};
  p.t = q.size(-2);
  p.s = k.size(-2);
  p.d = q.size(-1);
  p.dv = v.size(-1);
  p.bh = Shape(leading_dims(q)).numel();
  KDP_CHECK_FOR(op, p.d <= kMaxHead && p.dv <= kMaxHead, ShapeError,
                "head sizes above {} are not supported (query {}, value {})", kMaxHead,
                q.shape().str(), v.shape().str());
  p.inf = std::numeric_limits<float>::infinity();
  p.scale = static_cast<float>(o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(p.d)));
  p.causal = o.is_causal;
  p.per_seed = std::max<int64_t>(1, p.bh);
  return p;
}

// The additive mask: [T, S] for every batch entry, or one per entry.
void attention_mask(const char* op, Problem& p, const Tensor& q, const Tensor& mask) {
  if (!mask.defined()) return;
  std::vector<int64_t> per_batch = leading_dims(q);
  per_batch.push_back(p.t);
  per_batch.push_back(p.s);
  const bool shared = mask.shape() == Shape{p.t, p.s};
  KDP_CHECK_FOR(op, shared || mask.shape() == Shape(per_batch), ShapeError,
                "attn_mask {} is neither [T, S] = [{}, {}] nor {}", mask.shape().str(), p.t, p.s,
                Shape(per_batch).str());
  check_same_device(op, q, "query", mask, "attn_mask");
  p.mask = mask.data();
  p.mask_stride = shared ? 0 : p.t * p.s;
}

// Dropout's draws: per sample under SampleDraws (a batch entry of q's first
// dimension keeps its stream), else from the device's generator.
void attention_dropout(const char* op, Problem& p, const Tensor& q, float dropout_p) {
  KDP_CHECK_FOR(op, dropout_p >= 0.0f && dropout_p < 1.0f, ValueError,
                "dropout_p {} is not in [0, 1)", dropout_p);
  p.dropout = dropout_p > 0.0f;
  if (!p.dropout) return;
  p.threshold = random::uniform_threshold(dropout_p);
  p.keep_scale = 1.0f / (1.0f - dropout_p);
  std::vector<uint64_t> seeds;
  if (SampleDraws* draws = SampleDraws::active()) {
    KDP_CHECK_FOR(op, q.dim() >= 3 && static_cast<size_t>(q.size(0)) == draws->rows(), ShapeError,
                  "per-sample dropout draws for {} rows, and the query is {}", draws->rows(),
                  q.describe());
    seeds = draws->next_call();
    p.per_seed = std::max<int64_t>(1, p.bh / q.size(0));
  } else {
    Generator& gen = q.device().generator();
    seeds = {gen.seed()};
    p.base = gen.reserve(static_cast<uint64_t>(p.bh * p.t * p.s));
  }
  p.seeds =
      Seeds(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdp::attention seeds"), seeds.size());
  Kokkos::deep_copy(
      p.seeds,
      Kokkos::View<const uint64_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
          seeds.data(), seeds.size()));
}

// out and lse on the fp32 kernels (p's operands as they are).
void fp32_forward(const Problem& p, const Tensor& out, const Tensor& lse) {
  const Device& dev = out.device();
  if constexpr (compat::host_accessible_memory()) {
    const HostRows<float> h{p, p.q, p.k, p.v};
    float* o = out.data();
    float* l = lse.data();
    h.for_heads(dev, [&](int64_t b, float* work) { h.forward(b, work, o, l); });
  } else {
    for_rows("kdp::scaled_dot_product_attention", dev, p.bh * p.t,
             ForwardRows{p, out.data(), lse.data()});
  }
}

}  // namespace

}  // namespace ops_detail

using namespace ops_detail;

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& o) {
  trace::Region region("kdp::scaled_dot_product_attention");
  const char* op = "kdp::scaled_dot_product_attention";
  const Tensor& q = resolve(q_in);
  const Tensor& k = resolve(k_in);
  const Tensor& v = resolve(v_in);
  const Tensor& mask = resolve(o.attn_mask);
  Problem p = attention_problem(op, q, k, v, o);
  attention_mask(op, p, q, mask);
  attention_dropout(op, p, q, o.dropout_p);
  const Device& dev = q.device();
  std::vector<int64_t> out_dims = leading_dims(q);
  out_dims.push_back(p.t);
  out_dims.push_back(p.dv);
  Tensor out = Tensor::empty(Shape(out_dims), dev);
  Tensor lse = Tensor::empty(Shape{p.bh * p.t}, dev);
  AttentionSaved in;
  in.path = attention_path(p, autocast_precision());
  in.q_shape = q.shape();
  in.k_shape = k.shape();
  in.v_shape = v.shape();
  if (in.path == AttentionPath::bf16) {
    in.qb = kdp::detail::to_bf16(dev, q.cmatrix(p.bh * p.t, p.d));
    in.kb = kdp::detail::to_bf16(dev, k.cmatrix(p.bh * p.s, p.d));
    in.vb = kdp::detail::to_bf16(dev, v.cmatrix(p.bh * p.s, p.dv));
    const HostRows<uint16_t> h{p, in.qb.data(), in.kb.data(), in.vb.data()};
    float* o = out.data();
    float* l = lse.data();
    h.for_heads(dev, [&](int64_t b, float* work) { h.forward(b, work, o, l); });
  } else {
    const bool rounded = in.path == AttentionPath::rounded;
    in.q = rounded ? rounded_to_bf16(q) : q;
    in.k = rounded ? rounded_to_bf16(k) : k;
    in.v = rounded ? rounded_to_bf16(v) : v;
    p.q = in.q.data();
    p.k = in.k.data();
    p.v = in.v.data();
    fp32_forward(p, out, lse);
  }
  if (autograd::needs_grad({&q, &k, &v})) {
    auto node = std::make_shared<AttentionNode>(p, in, mask, out, lse);
    node->set_next_edges({&q, &k, &v});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kdp
