#pragma once
// The widest instruction set kdp's own host kernels use on this CPU, chosen at
// run time so that a build for baseline x86-64 (Debian's compiler defaults)
// runs at the speed of the CPU it lands on. KDP_MAX_CPU_ISA caps it
// (baseline, avx2, avx512, avx512_bf16, amx), as oneDNN's ONEDNN_MAX_CPU_ISA
// does for oneDNN: for tests of every path on one machine, and for a CPU whose
// wide units a user wants left alone. Kernels dispatch by comparing levels.

#include <string>

// kdp's x86-64 vector kernels are compiled (through GCC's or clang's target
// attributes) on x86-64, except in a device compiler's pass (nvcc, hipcc) and
// in a portable build (KDP_PORTABLE_KERNELS, CMake's KDP_ENABLE_X86_KERNELS=OFF),
// which takes the branch of every other CPU: scripts/test-portable.sh builds
// the code nvcc compiles, on any machine.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    !defined(__HIPCC__) && !defined(KDP_PORTABLE_KERNELS)
#define KDP_X86_KERNELS 1
#endif

namespace kdp::detail {

/// Levels in order: each includes the ones before it.
enum class CpuIsa : int {
  Baseline = 0,    // what the compiler targets (SSE2 on x86-64, NEON on aarch64)
  Avx2 = 1,        // AVX2 and FMA
  Avx512 = 2,      // AVX-512 F, BW, VL, DQ
  Avx512Bf16 = 3,  // and AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16)
  Amx = 4,         // and AMX-BF16 tiles, with the kernel's permission to use them
};

/// What the CPU (and the OS) offer, capped by KDP_MAX_CPU_ISA and by
/// set_cpu_isa_limit(). Baseline on every CPU but x86-64 and in builds with
/// KDP_PORTABLE_KERNELS.
CpuIsa cpu_isa();
/// What the CPU offers, no cap applied.
CpuIsa cpu_isa_detected();
/// Caps cpu_isa() from now on (tests run every path of kdp's kernels this
/// way); returns the previous cap. oneDNN takes the cap once, before its first
/// primitive: to cap it too, set KDP_MAX_CPU_ISA before the program starts.
CpuIsa set_cpu_isa_limit(CpuIsa limit);
/// Whether products with bf16 operands and fp32 sums outrun fp32 ones on this
/// CPU within cpu_isa(): on AMX tiles, and with AVX512_BF16 on AMD's CPUs,
/// whose bf16 dot products do twice the multiply-adds of their fp32 FMAs
/// (Zen 4: oneDNN's bf16 products at about twice row_gemm's fp32 rate on
/// attention's shapes). Intel's AVX512_BF16 without AMX multiplies no faster
/// than its two 512-bit FMA units (docs/performance.md, "Attention").
bool bf16_dots_outrun_fp32();
/// "baseline", "avx2", "avx512", "avx512_bf16", "amx".
const char* cpu_isa_name(CpuIsa isa);
/// The level a name stands for; throws ValueError naming the valid ones.
CpuIsa parse_cpu_isa(const std::string& name);

}  // namespace kdp::detail
