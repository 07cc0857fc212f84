// scaled_dot_product_attention: one query row a work item forward (keys in
// blocks, a running max and sum), and backward two passes that recompute the
// scores from the saved log-sum-exp: one a query row (dq, and the row's
// dO . O), one a key row (dk, dv). No work item writes another's output, so
// the sums go in one fixed order and need no atomics.

#include "kdp/ops/attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kdp/core/generator.hpp"
#include "kdp/core/threads.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/ops/activation.hpp"
#include "kernels/fork_join.hpp"
#include "kernels/native/host_kernels.hpp"
#include "kernels/native/row_gemm.hpp"
#include "kernels/native/vector_exp.hpp"
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

// f[c] = keep_scale where the draw for counter c0 + c is at least
// threshold, else 0: a row of dropout factors (Problem::kept's draws).
// One hash serves a pair of counters (2 k, 2 k + 1: Stream::draw24_pair); a
// counter at either end without its pair is drawn alone.
KDP_ALWAYS_INLINE void keep_row_body(float* __restrict f, int64_t n, uint64_t c0,
                                     const random::Stream& stream, uint32_t threshold,
                                     float keep_scale) {
  const int64_t head = static_cast<int64_t>(c0 & 1) < n ? static_cast<int64_t>(c0 & 1) : 0;
  if (head == 1) f[0] = stream.draw24(c0) >= threshold ? keep_scale : 0.0f;
  const int64_t pairs = (n - head) / 2;
  const uint64_t first = (c0 + static_cast<uint64_t>(head)) >> 1;
  float* g = f + head;
  for (int64_t k = 0; k < pairs; ++k) {
    uint32_t even = 0, odd = 0;
    stream.draw24_pair(first + static_cast<uint64_t>(k), even, odd);
    g[2 * k] = even >= threshold ? keep_scale : 0.0f;
    g[2 * k + 1] = odd >= threshold ? keep_scale : 0.0f;
  }
  const int64_t last = head + 2 * pairs;
  if (last < n) {
    f[last] = stream.draw24(c0 + static_cast<uint64_t>(last)) >= threshold ? keep_scale : 0.0f;
  }
}
KDP_HOST_KERNEL(keep_row, keep_row_body,
                (float* f, int64_t n, uint64_t c0, const random::Stream& stream, uint32_t threshold,
                 float keep_scale),
                (f, n, c0, stream, threshold, keep_scale))

// Host memory: the same sums on blocks of kBlock queries and kBlock keys,
// each product of two blocks one row_gemm (a row's bits do not depend on
// the others), on the rank's threads (Serial has one: the fork-join pool).
constexpr int64_t kBlock = 64;

struct HostBlocks {
  Problem p;

  int64_t query_blocks() const { return (p.t + kBlock - 1) / kBlock; }
  int64_t key_blocks() const { return (p.s + kBlock - 1) / kBlock; }

  // s[r, c] (row length kBlock) = scale q_(i0+r) . k_(j0+c) + mask, -inf
  // where the causal mask hides the key.
  void scores(int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t n, float* s) const {
    kdp::detail::row_gemm(false, true, rows, n, p.d, p.scale, p.q + (b * p.t + i0) * p.d, p.d,
                          p.k + (b * p.s + j0) * p.d, p.d, 0.0f, s, kBlock);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = s + r * kBlock;
      if (p.mask != nullptr) {
        const float* m = p.mask + b * p.mask_stride + (i0 + r) * p.s + j0;
        for (int64_t c = 0; c < n; ++c) row[c] += m[c];
      }
      if (p.causal) {
        for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < n; ++c) row[c] = -p.inf;
      }
    }
  }
  // The keys query block [i0, i0 + rows) sees: all, or up to its last row.
  int64_t key_end(int64_t i0, int64_t rows) const {
    return p.causal ? std::min(p.s, i0 + rows) : p.s;
  }
  // w[r, c] = exp(s[r, c] - lse[r]) in place (0 where lse is +inf: no key).
  void weights(float* s, const float* lse, int64_t rows, int64_t n) const {
    exp_rows(s, rows, n, kBlock, lse, -p.inf);
  }
  // keep[r, c] = the dropout factor of (query i0 + r, key j0 + c), with
  // dropout.
  void keep_tile(int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t n, float* keep) const {
    if (!p.dropout) return;
    const random::Stream stream(p.seeds(b / p.per_seed));
    for (int64_t r = 0; r < rows; ++r) {
      const uint64_t c0 =
          p.base + static_cast<uint64_t>(((b % p.per_seed) * p.t + i0 + r) * p.s + j0);
      keep_row(keep + r * kBlock, n, c0, stream, p.threshold, p.keep_scale);
    }
  }
  // x[r, c] *= keep[r, c], with dropout.
  void drop(float* x, const float* keep, int64_t rows, int64_t n) const {
    if (!p.dropout) return;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < n; ++c) x[r * kBlock + c] *= keep[r * kBlock + c];
    }
  }

  void forward(int64_t w, float* out, float* lse) const;
  void deltas(const Device& device, const float* dout, const float* out, float* delta) const;
  void backward_queries(int64_t w, const float* dout, const float* lse, const float* delta,
                        float* dq) const;
  void backward_keys(int64_t w, const float* dout, const float* lse, const float* delta, float* dk,
                     float* dv, float* dq) const;
};

// Query block w: the online softmax over key blocks, out and lse.
void HostBlocks::forward(int64_t w, float* out, float* lse) const {
  const int64_t b = w / query_blocks(), i0 = (w % query_blocks()) * kBlock;
  const int64_t rows = std::min(kBlock, p.t - i0);
  std::vector<float> s(static_cast<size_t>(kBlock * kBlock)), acc(static_cast<size_t>(rows * p.dv));
  std::vector<float> m(static_cast<size_t>(rows), -p.inf), l(static_cast<size_t>(rows), 0.0f);
  std::vector<float> top(m.size()), shift(m.size()), sums(m.size());
  std::vector<float> keep(p.dropout ? s.size() : 0);
  const int64_t end = key_end(i0, rows);
  for (int64_t j0 = 0; j0 < end; j0 += kBlock) {
    const int64_t n = std::min(kBlock, end - j0);
    scores(b, i0, rows, j0, n, s.data());
    std::copy(m.begin(), m.end(), top.begin());
    row_max(s.data(), rows, n, kBlock, top.data());
    // A row without a key yet shifts by +inf: its weights are 0.
    for (int64_t r = 0; r < rows; ++r)
      shift[size_t(r)] = top[size_t(r)] == -p.inf ? p.inf : top[size_t(r)];
    exp_rows(s.data(), rows, n, kBlock, shift.data(), -p.inf);
    row_sums(s.data(), rows, n, kBlock, sums.data());
    for (int64_t r = 0; r < rows; ++r) {
      const float x = m[size_t(r)] - shift[size_t(r)];  // -inf for the first keys: factor 0
      const float factor = x == -p.inf ? 0.0f : math::exp(x);
      l[size_t(r)] = l[size_t(r)] * factor + sums[size_t(r)];
      m[size_t(r)] = top[size_t(r)];
      if (factor == 1.0f) continue;
      float* a = acc.data() + r * p.dv;
      for (int64_t e = 0; e < p.dv; ++e) a[e] *= factor;
    }
    keep_tile(b, i0, rows, j0, n, keep.data());
    drop(s.data(), keep.data(), rows, n);
    kdp::detail::row_gemm(false, false, rows, p.dv, n, 1.0f, s.data(), kBlock,
                          p.v + (b * p.s + j0) * p.dv, p.dv, 1.0f, acc.data(), p.dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = b * p.t + i0 + r;
    float* o = out + row * p.dv;
    const float* a = acc.data() + r * p.dv;
    const bool none = l[size_t(r)] == 0.0f;
    const float inv = none ? 0.0f : 1.0f / l[size_t(r)];
    for (int64_t e = 0; e < p.dv; ++e) o[e] = a[e] * inv;
    lse[row] = none ? p.inf : m[size_t(r)] + math::log(l[size_t(r)]);
  }
}

// Query block w: dq = scale sum over key blocks of dS K, with
// dS = P (kept dO V^T - delta).
void HostBlocks::backward_queries(int64_t w, const float* dout, const float* lse,
                                  const float* delta, float* dq) const {
  const int64_t b = w / query_blocks(), i0 = (w % query_blocks()) * kBlock;
  const int64_t rows = std::min(kBlock, p.t - i0), first = b * p.t + i0;
  std::vector<float> s(static_cast<size_t>(kBlock * kBlock)), dp(s.size());
  std::vector<float> keep(p.dropout ? s.size() : 0);
  float* g = dq + first * p.d;
  for (int64_t e = 0; e < rows * p.d; ++e) g[e] = 0.0f;
  const int64_t end = key_end(i0, rows);
  for (int64_t j0 = 0; j0 < end; j0 += kBlock) {
    const int64_t n = std::min(kBlock, end - j0);
    scores(b, i0, rows, j0, n, s.data());
    weights(s.data(), lse + first, rows, n);
    kdp::detail::row_gemm(false, true, rows, n, p.dv, 1.0f, dout + first * p.dv, p.dv,
                          p.v + (b * p.s + j0) * p.dv, p.dv, 0.0f, dp.data(), kBlock);
    keep_tile(b, i0, rows, j0, n, keep.data());
    drop(dp.data(), keep.data(), rows, n);
    score_grads(dp.data(), s.data(), rows, n, kBlock, delta + first);
    kdp::detail::row_gemm(false, false, rows, p.d, n, p.scale, dp.data(), kBlock,
                          p.k + (b * p.s + j0) * p.d, p.d, 1.0f, g, p.d);
  }
}

// Key block w: dv = sum over query blocks of (kept P)^T dO, and
// dk = scale sum of dS^T Q. Where the keys are one block, the block holds
// every key a query sees: dq = scale dS K comes from the same tiles (dq
// non-null), as backward_queries would compute it.
void HostBlocks::backward_keys(int64_t w, const float* dout, const float* lse, const float* delta,
                               float* dk, float* dv, float* dq) const {
  const int64_t b = w / key_blocks(), j0 = (w % key_blocks()) * kBlock;
  const int64_t n = std::min(kBlock, p.s - j0), first = b * p.s + j0;
  std::vector<float> s(static_cast<size_t>(kBlock * kBlock)), dp(s.size());
  std::vector<float> keep(p.dropout ? s.size() : 0);
  if (dk != nullptr) std::fill(dk + first * p.d, dk + (first + n) * p.d, 0.0f);
  if (dv != nullptr) std::fill(dv + first * p.dv, dv + (first + n) * p.dv, 0.0f);
  for (int64_t i0 = p.causal ? (j0 / kBlock) * kBlock : 0; i0 < p.t; i0 += kBlock) {
    const int64_t rows = std::min(kBlock, p.t - i0), q0 = b * p.t + i0;
    // The keys the query block sees: with one key block, what
    // backward_queries scores.
    const int64_t seen = dq != nullptr ? key_end(i0, rows) : n;
    scores(b, i0, rows, j0, seen, s.data());
    weights(s.data(), lse + q0, rows, seen);
    kdp::detail::row_gemm(false, true, rows, seen, p.dv, 1.0f, dout + q0 * p.dv, p.dv,
                          p.v + first * p.dv, p.dv, 0.0f, dp.data(), kBlock);
    keep_tile(b, i0, rows, j0, seen, keep.data());
    drop(dp.data(), keep.data(), rows, seen);
    score_grads(dp.data(), s.data(), rows, seen, kBlock, delta + q0);
    if (dq != nullptr) {
      float* g = dq + q0 * p.d;
      for (int64_t e = 0; e < rows * p.d; ++e) g[e] = 0.0f;
      kdp::detail::row_gemm(false, false, rows, p.d, seen, p.scale, dp.data(), kBlock,
                            p.k + first * p.d, p.d, 1.0f, g, p.d);
    }
    if (dv != nullptr) {
      drop(s.data(), keep.data(), rows, seen);
      kdp::detail::row_gemm(true, false, seen, p.dv, rows, 1.0f, s.data(), kBlock, dout + q0 * p.dv,
                            p.dv, 1.0f, dv + first * p.dv, p.dv);
    }
    if (dk != nullptr) {
      kdp::detail::row_gemm(true, false, seen, p.d, rows, p.scale, dp.data(), kBlock,
                            p.q + q0 * p.d, p.d, 1.0f, dk + first * p.d, p.d);
    }
  }
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

// delta[r] = dO[r] . O[r] for every query row.
void HostBlocks::deltas(const Device& device, const float* dout, const float* out,
                        float* delta) const {
  const int64_t rows = p.bh * p.t, dv = p.dv;
  for_blocks(device, (rows + 255) / 256, [=](int64_t w) {
    for (int64_t r = w * 256; r < std::min(rows, (w + 1) * 256); ++r) {
      float d = 0.0f;
      for (int64_t e = 0; e < dv; ++e) d += dout[r * dv + e] * out[r * dv + e];
      delta[r] = d;
    }
  });
}

class AttentionNode : public autograd::Node {
 public:
  AttentionNode(const Problem& p, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& mask, const Tensor& out, const Tensor& lse)
      : Node(q.device()),
        p_(p),
        q_(q),
        k_(k),
        v_(v),
        out_(out),
        mask_(mask.defined() ? mask.detach() : Tensor()),
        lse_(lse) {}
  const char* name() const override { return "kdp::scaled_dot_product_attention"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Problem p = p_;
    const Tensor& q = q_.get(*this);
    const Tensor& k = k_.get(*this);
    const Tensor& v = v_.get(*this);
    const Tensor& out = out_.get(*this);
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.mask = mask_.defined() ? mask_.data() : nullptr;
    const Tensor g = grads[0];
    Tensor gq, gk, gv;
    if (next_edges()[0].valid()) gq = Tensor::empty(q.shape(), device());
    if (next_edges()[1].valid()) gk = Tensor::empty(k.shape(), device());
    if (next_edges()[2].valid()) gv = Tensor::empty(v.shape(), device());
    Tensor delta = Tensor::empty(Shape{p.bh * p.t}, device());
    float* dq = gq.defined() ? gq.data() : nullptr;
    float* dk = gk.defined() ? gk.data() : nullptr;
    float* dv = gv.defined() ? gv.data() : nullptr;
    if constexpr (compat::host_accessible_memory()) {
      const HostBlocks h{p};
      h.deltas(device(), g.data(), out.data(), delta.data());
      // One key block: every query's gradient comes from the key pass.
      const bool fused = h.key_blocks() == 1;
      if (dq != nullptr && !fused) {
        for_blocks(device(), p.bh * h.query_blocks(), [&](int64_t w) {
          h.backward_queries(w, g.data(), lse_.data(), delta.data(), dq);
        });
      }
      if (dk != nullptr || dv != nullptr || (dq != nullptr && fused)) {
        for_blocks(device(), p.bh * h.key_blocks(), [&](int64_t w) {
          h.backward_keys(w, g.data(), lse_.data(), delta.data(), dk, dv, fused ? dq : nullptr);
        });
      }
    } else {
      for_rows("kdp::scaled_dot_product_attention backward q", device(), p.bh * p.t,
               QueryRows{p, g.data(), out.data(), lse_.data(), delta.data(), dq});
      if (dk != nullptr || dv != nullptr) {
        for_rows("kdp::scaled_dot_product_attention backward kv", device(), p.bh * p.s,
                 KeyRows{p, g.data(), lse_.data(), delta.data(), dk, dv});
      }
    }
    device().fence("kdp::scaled_dot_product_attention backward");
    return {gq, gk, gv};
  }
  void release_saved() override {
    q_.reset();
    k_.reset();
    v_.reset();
    out_.reset();
    mask_ = lse_ = Tensor();
  }

 private:
  Problem p_;
  autograd::SavedTensor q_, k_, v_, out_;
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
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  if constexpr (compat::host_accessible_memory()) {
    const HostBlocks h{p};
    float* o = out.data();
    float* l = lse.data();
    for_blocks(dev, p.bh * h.query_blocks(), [&](int64_t w) { h.forward(w, o, l); });
  } else {
    for_rows("kdp::scaled_dot_product_attention", dev, p.bh * p.t,
             ForwardRows{p, out.data(), lse.data()});
  }
  if (autograd::needs_grad({&q, &k, &v})) {
    auto node = std::make_shared<AttentionNode>(p, q, k, v, mask, out, lse);
    node->set_next_edges({&q, &k, &v});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kdp
