#include "kdp/core/checked_size.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp {

namespace {

[[noreturn]] void too_large(const std::string& what, const std::string& sizes,
                            size_t element_bytes) {
  KDP_FAIL_FOR(what, ShapeError,
               "{} elements of {} bytes are more than one allocation can hold ({} bytes at most)",
               sizes, element_bytes, kMaxAllocationBytes);
}

}  // namespace

int64_t checked_numel(const std::vector<int64_t>& dims, size_t element_bytes,
                      const std::string& what) {
  for (int64_t d : dims) {
    KDP_CHECK_FOR(what, d >= 0, ShapeError, "size {} in [{}] is negative", d,
                  fmt::join(dims, ", "));
  }
  uint64_t bytes = element_bytes;
  int64_t numel = 1;
  bool overflow = false;
  for (int64_t d : dims) {
    if (d == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) ||
               __builtin_mul_overflow(numel, d, &numel);
  }
  if (overflow || bytes > kMaxAllocationBytes) {
    too_large(what, fmt::format("{}", fmt::join(dims, " x ")), element_bytes);
  }
  return numel;
}

size_t checked_bytes(int64_t count, size_t element_bytes, const std::string& what) {
  KDP_CHECK_FOR(what, count >= 0, ShapeError, "element count {} is negative", count);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), element_bytes, &bytes) ||
      bytes > kMaxAllocationBytes) {
    too_large(what, std::to_string(count), element_bytes);
  }
  return static_cast<size_t>(bytes);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  size_t u = 0;
  while (bytes >= 1000.0 && u + 1 < std::size(units)) {
    bytes /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace kdp
