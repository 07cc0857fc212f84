#include "kdp/parallel/devices.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "kdp/core/error.hpp"
#include "kdp/core/runtime.hpp"

namespace kdp {

std::vector<Device> devices(int n) {
  return Runtime::get().devices(n);
}

bool devices_concurrent(int n) {
  return Runtime::get().devices_concurrent(n);
}

int device_count() {
  if (const char* env = std::getenv("KDP_DEVICES")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || n < 1) {
      // The message names the environment variable at fault, not a function.
      throw ValueError(fmt::format("KDP_DEVICES='{}' is not a positive integer", env));
    }
    return static_cast<int>(n);
  }
  const int parts = compat::max_partitions(get_default_device().space());
  return parts >= 2 && parts < (1 << 16) ? parts : 1;
}

}  // namespace kdp
