#include "kdp/core/precision.hpp"

#include "core/check.hpp"
#include "core/cpu_isa.hpp"
#include "kdp/config.hpp"
#include "kdp/core/execution_context.hpp"

namespace kdp {

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
  return ExecutionContext::current().precision;
}

autocast::autocast(Precision precision, bool enabled, const Device& device)
    : previous_(autocast_precision()) {
  if (enabled) ExecutionContext::current().precision = resolve_precision(precision, device);
}

autocast::~autocast() {
  ExecutionContext::current().precision = previous_;
}

}  // namespace kdp
