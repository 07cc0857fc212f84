#include "kernels/vendor/openblas_core.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

#include "kdp/core/runtime.hpp"

// OpenBLAS's own query, where the host BLAS is OpenBLAS (null otherwise).
extern "C" char* openblas_get_corename(void) __attribute__((weak));

namespace kdp {

namespace kernels {

std::string openblas_core_advice(const std::string& core, detail::CpuIsa isa) {
  // OpenBLAS's x86-64 targets from before AVX, which it falls back to.
  constexpr std::array<std::string_view, 15> kGeneric = {
      "prescott", "core2",     "penryn",     "dunnington",   "nehalem",
      "atom",     "katmai",    "coppermine", "northwood",    "banias",
      "opteron",  "barcelona", "bobcat",     "opteron_sse3", "unknown"};
  std::string lower = core;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool generic = std::find(kGeneric.begin(), kGeneric.end(), lower) != kGeneric.end();
  if (!generic || isa < detail::CpuIsa::Avx2) return "";
  const char* want = isa >= detail::CpuIsa::Avx512 ? "SkylakeX" : "Haswell";
  return fmt::format(
      "the BLAS (OpenBLAS) took its generic {} kernels on this {} CPU, which makes every "
      "product several times slower: export OPENBLAS_CORETYPE={} before starting",
      core, detail::cpu_isa_name(isa), want);
}

}  // namespace kernels

std::string blas_kernel_advice() {
  if (openblas_get_corename == nullptr) return "";
  const char* core = openblas_get_corename();
  return core == nullptr ? "" : kernels::openblas_core_advice(core, detail::cpu_isa_detected());
}

}  // namespace kdp
