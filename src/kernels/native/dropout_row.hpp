#pragma once
/// \file
/// Dropout's draws on the host: a run of consecutive counters of one stream,
/// two counters to a hash (random::Stream::draw24_pair) at the CPU's vector
/// width. Every element gets draw24() of its own counter, so the bits do not
/// depend on where a run starts or how a range is cut into runs.

#include <cstdint>

#include "kdp/core/generator.hpp"

namespace kdp::detail {

/// out[i] = in[i] * (scale where draw24(c0 + i) >= threshold, else 0) for
/// i in [0, n). A dropped element is multiplied by 0, so a NaN stays NaN.
void dropout_row(const float* in, float* out, int64_t n, uint64_t c0, const random::Stream& stream,
                 uint32_t threshold, float scale);

/// f[i] = scale where draw24(c0 + i) >= threshold, else 0, for i in [0, n):
/// the factors dropout_row multiplies by.
void dropout_factors(float* f, int64_t n, uint64_t c0, const random::Stream& stream,
                     uint32_t threshold, float scale);

}  // namespace kdp::detail
