#include "core/cpu_isa.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(KDP_PORTABLE_KERNELS)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KDP_CPU_ISA_X86 1
#endif

namespace kdp::detail {

namespace {

constexpr const char* kNames[] = {"baseline", "avx2", "avx512", "avx512_bf16", "amx"};

#if defined(KDP_CPU_ISA_X86)
// The OS saves the register state that `mask` names in XCR0.
bool os_saves(unsigned mask) {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  const unsigned long long xcr0 = (static_cast<unsigned long long>(edx) << 32) | eax;
  return (xcr0 & mask) == mask;
}

// Linux hands out AMX tile data only to a process that asks (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA): without it the first tile
// instruction faults.
bool amx_permitted() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return ::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The vendor string of CPUID leaf 0 (EBX, EDX, ECX) reads "AuthenticAMD".
bool amd() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid(0, a, b, c, d);
  constexpr unsigned kAuth = 0x68747541u, kEnti = 0x69746e65u, kCamd = 0x444d4163u;
  return a >= 1 && b == kAuth && d == kEnti && c == kCamd;  // a: the highest leaf
}

CpuIsa detect() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return CpuIsa::Baseline;
  __cpuid(1, a, b, c, d);
  const bool osxsave = (c & (1u << 27)) != 0, fma = (c & (1u << 12)) != 0;
  if (!osxsave || !os_saves(0x6)) return CpuIsa::Baseline;  // SSE and AVX state
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned ebx7 = b, edx7 = d;
  if (!fma || (ebx7 & (1u << 5)) == 0) return CpuIsa::Baseline;  // AVX2
  // AVX-512 F, DQ, BW, VL and the opmask, ZMM upper and high-16 state.
  const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
  if ((ebx7 & avx512) != avx512 || !os_saves(0xe6)) return CpuIsa::Avx2;
  __cpuid_count(7, 1, a, b, c, d);
  if ((a & (1u << 5)) == 0) return CpuIsa::Avx512;                        // AVX512_BF16
  const bool amx = (edx7 & (1u << 22)) != 0 && (edx7 & (1u << 24)) != 0;  // AMX-BF16, AMX-TILE
  if (!amx || !os_saves(0x60000) || !amx_permitted()) return CpuIsa::Avx512Bf16;
  return CpuIsa::Amx;
}
#else
bool amd() {
  return false;
}
CpuIsa detect() {
  return CpuIsa::Baseline;
}
#endif

CpuIsa from_environment() {
  const char* env = std::getenv("KDP_MAX_CPU_ISA");
  return env != nullptr && *env != '\0' ? parse_cpu_isa(env) : CpuIsa::Amx;
}

std::atomic<int>& limit() {
  static std::atomic<int> value{static_cast<int>(from_environment())};
  return value;
}

}  // namespace

CpuIsa cpu_isa_detected() {
  static const CpuIsa detected = detect();
  return detected;
}

CpuIsa cpu_isa() {
  return static_cast<CpuIsa>(std::min(static_cast<int>(cpu_isa_detected()), limit().load()));
}

CpuIsa set_cpu_isa_limit(CpuIsa cap) {
  return static_cast<CpuIsa>(limit().exchange(static_cast<int>(cap)));
}

bool bf16_dots_outrun_fp32() {
  static const bool is_amd = amd();
  const CpuIsa isa = cpu_isa();
  return isa >= CpuIsa::Amx || (isa >= CpuIsa::Avx512Bf16 && is_amd);
}

const char* cpu_isa_name(CpuIsa isa) {
  return kNames[static_cast<int>(isa)];
}

CpuIsa parse_cpu_isa(const std::string& name) {
  for (int i = 0; i < 5; ++i) {
    if (name == kNames[i]) return static_cast<CpuIsa>(i);
  }
  KDP_FAIL(ValueError,
           "KDP_MAX_CPU_ISA '{}' is not one of baseline, avx2, "
           "avx512, avx512_bf16, amx",
           name);
}

}  // namespace kdp::detail
