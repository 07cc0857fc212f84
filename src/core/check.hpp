#pragma once
// KDP_CHECK: kdp's argument and state checks, one line each.
//
//   KDP_CHECK(n >= 1, ValueError, "kdp::devices", "asked for {} devices; need at least 1", n);
//
// throws ValueError("kdp::devices", "asked for 0 devices; need at least 1")
// (what(): "kdp::devices: asked for ...") unless the condition holds. The
// message is formatted only when the check fails.

#include <fmt/format.h>

#include "kdp/core/error.hpp"

#define KDP_CHECK(condition, ErrorType, origin, ...)                       \
  do {                                                                     \
    if (!(condition)) throw ErrorType((origin), fmt::format(__VA_ARGS__)); \
  } while (false)
