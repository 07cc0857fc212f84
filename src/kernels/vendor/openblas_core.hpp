#pragma once
// Which kernels OpenBLAS chose for this CPU. OpenBLAS picks them when it
// loads; a release older than the CPU does not know its model and falls back
// to generic SSE kernels, several times slower than the CPU's own (Debian 12's
// 0.3.21 on Intel's family 6 model 207). OPENBLAS_CORETYPE, exported before
// the program starts, chooses them by hand.

#include <string>

#include "core/cpu_isa.hpp"

namespace kdp::kernels {

/// The OPENBLAS_CORETYPE that gives a CPU of level `isa` its own kernels
/// where OpenBLAS's, named `core` (openblas_get_corename), are a generic
/// fallback below the CPU's AVX2 or AVX-512 ("SkylakeX", "Haswell"); else "".
std::string openblas_core_for(const std::string& core, detail::CpuIsa isa);

/// The advice for OpenBLAS's kernels named `core` on a CPU of level `isa`:
/// what to export where openblas_core_for() names a core, else "".
std::string openblas_core_advice(const std::string& core, detail::CpuIsa isa);

}  // namespace kdp::kernels
