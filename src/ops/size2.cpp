#include "kdp/ops/size2.hpp"

#include <fmt/format.h>

namespace kdp {

std::string Size2::str() const {
  return h == w ? std::to_string(h) : fmt::format("({}, {})", h, w);
}

std::string Size3::str() const {
  return d == h && h == w ? std::to_string(d) : fmt::format("({}, {}, {})", d, h, w);
}

int64_t window_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                           int64_t dilation, bool ceil_mode) {
  const int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // ceil_mode: the last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * stride >= in + padding) --out;
  return out;
}

}  // namespace kdp
