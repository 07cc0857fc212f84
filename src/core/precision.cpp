#include "kdp/core/precision.hpp"

#include "core/check.hpp"
#include "core/cpu_isa.hpp"
#include "kdp/config.hpp"

namespace kdp {

namespace {
thread_local Precision current = Precision::fp32;
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::bf16:
      return "bf16";
    case Precision::Auto:
      return "auto";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::Auto}) {
    if (name == precision_name(p)) return p;
  }
  KDP_FAIL(ValueError, "precision '{}' is not one of fp32, bf16, auto", name);
}

bool has_bf16_matrix_units(const Device& device) {
  if constexpr (compat::gpu_backend()) {
    return compat::gpu_compute_capability(device.gpu()) >= 80;
  } else {
    (void)device;
    return KDP_HAVE_ONEDNN && detail::cpu_isa() >= detail::CpuIsa::Amx;
  }
}

Precision resolve_precision(Precision precision, const Device& device) {
  if (precision != Precision::Auto) return precision;
  return has_bf16_matrix_units(device) ? Precision::bf16 : Precision::fp32;
}

Precision autocast_precision() {
  return current;
}

autocast::autocast(Precision precision, bool enabled, const Device& device) : previous_(current) {
  if (enabled) current = resolve_precision(precision, device);
}

autocast::~autocast() {
  current = previous_;
}

}  // namespace kdp
