#pragma once
/// \file
/// Sizes computed with overflow checks: every allocation kdp makes goes
/// through these, so a size that wraps around (a layer of 2^62 features, a
/// file claiming 2^70 bytes) is an error naming what was asked for, never a
/// small allocation that is then written past.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kdp {

/// The most bytes one allocation may span (what a pointer difference holds).
constexpr uint64_t kMaxAllocationBytes = static_cast<uint64_t>(INT64_MAX);

/// The number of elements of `dims`, each of `element_bytes` bytes. Throws
/// ShapeError naming `what` and the dimensions when one is negative or when
/// the elements' bytes exceed kMaxAllocationBytes.
int64_t checked_numel(const std::vector<int64_t>& dims, size_t element_bytes,
                      const std::string& what);

/// `count` elements of `element_bytes` bytes, in bytes; throws ShapeError
/// naming `what` when negative or beyond kMaxAllocationBytes.
size_t checked_bytes(int64_t count, size_t element_bytes, const std::string& what);

/// A byte count for people: "512 B", "3.1 GB", "4.0 TB" (powers of 1000).
std::string format_bytes(double bytes);

}  // namespace kdp
