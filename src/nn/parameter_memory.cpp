#include "kdp/nn/parameter_memory.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"

namespace kdp::nn {

void check_parameters_fit(const std::vector<LayerMemory>& layers, const Device& device,
                          const std::string& what) {
  if (layers.empty()) return;
  size_t total = 0;
  bool overflow = false;
  for (const LayerMemory& l : layers)
    overflow = __builtin_add_overflow(total, l.bytes, &total) || overflow;
  const size_t capacity = device.memory_capacity();
  if (!overflow && total <= capacity) return;
  const auto largest = std::max_element(
      layers.begin(), layers.end(),
      [](const LayerMemory& a, const LayerMemory& b) { return a.bytes < b.bytes; });
  const std::string need =
      overflow ? "more bytes than can be counted" : format_bytes(static_cast<double>(total));
  std::string message =
      fmt::format("its parameters need {} ({} bytes), more than the {} of memory of {}", need,
                  overflow ? std::string("over 2^64") : std::to_string(total),
                  format_bytes(static_cast<double>(capacity)), device.str());
  if (layers.size() > 1) {
    message += fmt::format("; the largest layer is '{}', {}, with {} ({} bytes)", largest->name,
                           largest->description, format_bytes(static_cast<double>(largest->bytes)),
                           largest->bytes);
  }
  KDP_FAIL_FOR(what, ValueError, "{}", message);
}

}  // namespace kdp::nn
