#pragma once
// bfloat16: the upper half of a float (8 exponent bits, 8 mantissa bits
// with the implicit one), the input type of mixed-precision products. kdp
// keeps bf16 values as their 16 bits in uint16_t. Rounding is to nearest,
// ties to even; a NaN stays a (quiet) NaN; a denormal float becomes a zero of
// its sign, as AVX512_BF16's vcvtneps2bf16 makes it, so that every path (AVX512_BF16,
// AVX-512, AVX2, scalar, GPU) gives the same bits.

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>

namespace kdp::detail {

KOKKOS_INLINE_FUNCTION uint16_t to_bf16(float value) {
  uint32_t u = 0;
  std::memcpy(&u, &value, sizeof(u));
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // zero, denormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

KOKKOS_INLINE_FUNCTION float from_bf16(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float value = 0.0f;
  std::memcpy(&value, &u, sizeof(value));
  return value;
}

/// The float nearest `value` that a bf16 holds: from_bf16(to_bf16(value)).
KOKKOS_INLINE_FUNCTION float round_to_bf16(float value) {
  return from_bf16(to_bf16(value));
}

/// out[i] = to_bf16(in[i]) for i < n, host memory, on the calling thread with
/// the widest instructions cpu_isa() allows.
void to_bf16_host(const float* in, uint16_t* out, int64_t n);

/// out[i] = round_to_bf16(in[i]) for i < n, host memory, as to_bf16_host.
void round_to_bf16_host(const float* in, float* out, int64_t n);

}  // namespace kdp::detail
