#include "kernels/native/dropout_row.hpp"

#include "kernels/native/host_kernels.hpp"

namespace kdp::detail {

namespace {

// Element i's factor from its draw: with kScaleInput it multiplies in[i],
// without it it is written out as it is.
template <bool kScaleInput>
KDP_ALWAYS_INLINE void put(const float* __restrict in, float* __restrict out, int64_t i,
                           uint32_t draw, uint32_t threshold, float scale) {
  const float factor = draw >= threshold ? scale : 0.0f;
  if constexpr (kScaleInput) {
    out[i] = in[i] * factor;
  } else {
    out[i] = factor;
  }
}

// One body for both kernels. Whole pairs of counters (2 k, 2 k + 1) take one
// hash; a counter at either end without its pair is drawn alone, with the
// same number draw24 gives it in a pair.
template <bool kScaleInput>
KDP_ALWAYS_INLINE void dropout_run(const float* __restrict in, float* __restrict out, int64_t n,
                                   uint64_t c0, const random::Stream& stream, uint32_t threshold,
                                   float scale) {
  if (n <= 0) return;
  const int64_t head = static_cast<int64_t>(c0 & 1);
  if (head == 1) put<kScaleInput>(in, out, 0, stream.draw24(c0), threshold, scale);
  const int64_t pairs = (n - head) / 2;
  const uint64_t first = (c0 + static_cast<uint64_t>(head)) >> 1;
  for (int64_t k = 0; k < pairs; ++k) {
    uint32_t even = 0, odd = 0;
    stream.draw24_pair(first + static_cast<uint64_t>(k), even, odd);
    put<kScaleInput>(in, out, head + 2 * k, even, threshold, scale);
    put<kScaleInput>(in, out, head + 2 * k + 1, odd, threshold, scale);
  }
  const int64_t last = head + 2 * pairs;
  if (last < n) {
    put<kScaleInput>(in, out, last, stream.draw24(c0 + static_cast<uint64_t>(last)), threshold,
                     scale);
  }
}

KDP_ALWAYS_INLINE void dropout_row_body(const float* __restrict in, float* __restrict out,
                                        int64_t n, uint64_t c0, const random::Stream& stream,
                                        uint32_t threshold, float scale) {
  dropout_run<true>(in, out, n, c0, stream, threshold, scale);
}
KDP_ALWAYS_INLINE void dropout_factors_body(float* __restrict f, int64_t n, uint64_t c0,
                                            const random::Stream& stream, uint32_t threshold,
                                            float scale) {
  dropout_run<false>(nullptr, f, n, c0, stream, threshold, scale);
}

}  // namespace

KDP_HOST_KERNEL(dropout_row, dropout_row_body,
                (const float* in, float* out, int64_t n, uint64_t c0, const random::Stream& stream,
                 uint32_t threshold, float scale),
                (in, out, n, c0, stream, threshold, scale))
KDP_HOST_KERNEL(dropout_factors, dropout_factors_body,
                (float* f, int64_t n, uint64_t c0, const random::Stream& stream, uint32_t threshold,
                 float scale),
                (f, n, c0, stream, threshold, scale))

}  // namespace kdp::detail
