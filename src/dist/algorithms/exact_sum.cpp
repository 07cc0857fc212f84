#include "dist/algorithms/exact_sum.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.hpp"

namespace kdp::dist::detail {

std::vector<double> exact_sum(Communicator& comm, const std::vector<std::vector<double>>& parts,
                              size_t length, int terms) {
  const double infinity = std::numeric_limits<double>::infinity();
  std::vector<double> largest(length, 0.0);
  for (const std::vector<double>& p : parts) {
    KDP_CHECK(p.size() == length, ValueError, "an exact sum of {} entries got a part of {}", length,
              p.size());
    for (size_t k = 0; k < length; ++k) {
      const double m = std::fabs(p[k]);
      largest[k] = std::isfinite(m) ? std::max(largest[k], m) : infinity;
    }
  }
  comm.allreduce(largest.data(), length, ReduceOp::Max);
  // Terms near the largest double are summed scaled down by 2^shift (exact:
  // what the scaling could lose lies far below the grid).
  std::vector<double> sum(length, 0.0);
  std::vector<int> shift(length, 0);
  for (size_t k = 0; k < length; ++k) {
    if (!std::isfinite(largest[k])) {
      for (const std::vector<double>& p : parts) sum[k] += p[k];
      continue;
    }
    const int grid = grid_exponent(largest[k], terms);
    shift[k] = std::max(0, grid - 1000);
    const double magic = std::ldexp(1.5, grid - shift[k]);
    for (const std::vector<double>& p : parts) {
      sum[k] += (std::ldexp(p[k], -shift[k]) + magic) - magic;
    }
  }
  comm.allreduce(sum.data(), length, ReduceOp::Sum);
  for (size_t k = 0; k < length; ++k) sum[k] = std::ldexp(sum[k], shift[k]);
  return sum;
}

// With q = exponent + headroom - 51, x + 1.5 2^(q + 52) rounds x to a
// multiple of 2^q for |x| < 2^(q + 51), and the sum of `terms` values below
// 2^exponent stays below 2^(q + 51).
int grid_exponent(double largest, int terms) {
  const int headroom = static_cast<int>(std::ceil(std::log2(std::max(terms, 1)))) + 1;
  int exponent = 0;
  std::frexp(largest, &exponent);  // largest < 2^exponent
  return exponent + headroom + 1;
}

}  // namespace kdp::dist::detail
