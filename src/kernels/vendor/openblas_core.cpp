#include "kernels/vendor/openblas_core.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string_view>

#include "kdp/core/runtime.hpp"

// OpenBLAS's own query, where the host BLAS is OpenBLAS (null otherwise).
extern "C" char* openblas_get_corename(void) __attribute__((weak));

namespace kdp {

namespace kernels {

std::string openblas_core_for(const std::string& core, detail::CpuIsa isa) {
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
  return isa >= detail::CpuIsa::Avx512 ? "SkylakeX" : "Haswell";
}

std::string openblas_core_advice(const std::string& core, detail::CpuIsa isa) {
  const std::string want = openblas_core_for(core, isa);
  if (want.empty()) return "";
  return fmt::format(
      "the BLAS (OpenBLAS) took its generic {} kernels on this {} CPU, which makes every "
      "product several times slower: export OPENBLAS_CORETYPE={} before starting",
      core, detail::cpu_isa_name(isa), want);
}

}  // namespace kernels

namespace {

// OpenBLAS's kernels' name, or "" with another BLAS.
std::string openblas_core() {
  if (openblas_get_corename == nullptr) return "";
  const char* core = openblas_get_corename();
  return core == nullptr ? "" : core;
}

}  // namespace

std::string blas_kernel_advice() {
  const std::string core = openblas_core();
  return core.empty() ? "" : kernels::openblas_core_advice(core, detail::cpu_isa_detected());
}

void use_the_cpus_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string core = openblas_core();
  const std::string want =
      core.empty() ? "" : kernels::openblas_core_for(core, detail::cpu_isa_detected());
  if (want.empty()) return;
  ::setenv("KDP_OPENBLAS_FALLBACK", core.c_str(), 1);
  ::setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPENBLAS_CORETYPE");  // not restarted: the generic kernels, and the advice
  ::unsetenv("KDP_OPENBLAS_FALLBACK");
}

std::string blas_kernel_line() {
  if (std::string advice = blas_kernel_advice(); !advice.empty()) return advice;
  const char* fallback = std::getenv("KDP_OPENBLAS_FALLBACK");
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  if (fallback == nullptr || chosen == nullptr || openblas_core().empty()) return "";
  return fmt::format(
      "the BLAS (OpenBLAS) runs its {} kernels (OPENBLAS_CORETYPE={}, set at start: it took its "
      "generic {} kernels on this CPU)",
      openblas_core(), chosen, fallback);
}

}  // namespace kdp
