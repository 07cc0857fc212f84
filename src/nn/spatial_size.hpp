#pragma once
// What the N-d layer families (ConvNd, the pools) need of their window sizes
// whatever N is: the numbers along each spatial dimension, and the text
// PyTorch's repr shows.

#include <cstdint>
#include <string>
#include <vector>

#include "kdp/ops/size2.hpp"

namespace kdp::nn::detail {

inline std::vector<int64_t> dims_of(int64_t s) {
  return {s};
}
inline std::vector<int64_t> dims_of(const Size2& s) {
  return {s.h, s.w};
}
inline std::vector<int64_t> dims_of(const Size3& s) {
  return {s.d, s.h, s.w};
}

inline std::string str_of(int64_t s) {
  return std::to_string(s);
}
inline std::string str_of(const Size2& s) {
  return s.str();
}
inline std::string str_of(const Size3& s) {
  return s.str();
}

// Whether every dimension of `s` is at least `least`.
template <class Size>
bool all_at_least(const Size& s, int64_t least) {
  for (int64_t v : dims_of(s)) {
    if (v < least) return false;
  }
  return true;
}

}  // namespace kdp::nn::detail
