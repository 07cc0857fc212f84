#include "kernels/native/finite.hpp"

#include <algorithm>

#include "kernels/native/host_kernels.hpp"

namespace kdp::detail {

namespace {

// Counted in integers from the bits: exact in any order, so vectorized.
KDP_ALWAYS_INLINE void count_body(const float* __restrict x, int64_t n, int64_t* count) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    __builtin_memcpy(&bits, x + i, sizeof(bits));
    c += (bits & 0x7f800000u) == 0x7f800000u ? 1 : 0;
  }
  *count = c;
}
KDP_HOST_KERNEL(count_block, count_body, (const float* __restrict x, int64_t n, int64_t* count),
                (x, n, count))

// The largest exponent field of x[0, n): all ones when one is NaN or Inf. A
// maximum of integers, exact in any order, two vector instructions for
// sixteen values.
KDP_ALWAYS_INLINE void exponent_max_body(const float* __restrict x, int64_t n, uint32_t* out) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    __builtin_memcpy(&bits, x + i, sizeof(bits));
    const uint32_t e = bits & 0x7f800000u;
    m = e > m ? e : m;
  }
  *out = m;
}
KDP_HOST_KERNEL(exponent_max_block, exponent_max_body,
                (const float* __restrict x, int64_t n, uint32_t* out), (x, n, out))

}  // namespace

int64_t count_non_finite(const float* x, int64_t n) {
  if (n <= 0) return 0;
  uint32_t exponent = 0;
  exponent_max_block(x, n, &exponent);  // the common case, all finite, at a third of a count's cost
  if (exponent != 0x7f800000u) return 0;
  int64_t count = 0;
  count_block(x, n, &count);
  return count;
}

int64_t first_non_finite(const float* x, int64_t n) {
  constexpr int64_t kBlock = 4096;  // scanned whole; the one that holds one is searched
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    uint32_t exponent = 0;
    exponent_max_block(x + b, e - b, &exponent);
    if (exponent != 0x7f800000u) continue;
    for (int64_t i = b; i < e; ++i) {
      uint32_t bits;
      __builtin_memcpy(&bits, x + i, sizeof(bits));
      if ((bits & 0x7f800000u) == 0x7f800000u) return i;
    }
  }
  return n;
}

}  // namespace kdp::detail
