#include <gtest/gtest.h>

#include <string>

#include "kdp/core/runtime.hpp"
#include "kernels/vendor/openblas_core.hpp"

using kdp::detail::CpuIsa;
using kdp::kernels::openblas_core_advice;

// OpenBLAS's generic fallback on a CPU with wider units is reported with the
// core type that uses them; a fitting choice, or a CPU without AVX2, is not.
TEST(OpenBlasCore, AGenericFallbackOnAWiderCpuIsReported) {
  const std::string avx512 = openblas_core_advice("Prescott", CpuIsa::Avx512Bf16);
  EXPECT_NE(avx512.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << avx512;
  EXPECT_NE(avx512.find("Prescott"), std::string::npos) << avx512;
  const std::string avx2 = openblas_core_advice("nehalem", CpuIsa::Avx2);
  EXPECT_NE(avx2.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << avx2;

  EXPECT_EQ(openblas_core_advice("SkylakeX", CpuIsa::Avx512), "");
  EXPECT_EQ(openblas_core_advice("Cooperlake", CpuIsa::Avx512Bf16), "");
  EXPECT_EQ(openblas_core_advice("Haswell", CpuIsa::Avx2), "");
  EXPECT_EQ(openblas_core_advice("Prescott", CpuIsa::Baseline), "");

  // The core type kdp-train restarts with: the one the advice names.
  EXPECT_EQ(kdp::kernels::openblas_core_for("Prescott", CpuIsa::Avx512Bf16), "SkylakeX");
  EXPECT_EQ(kdp::kernels::openblas_core_for("nehalem", CpuIsa::Avx2), "Haswell");
  EXPECT_EQ(kdp::kernels::openblas_core_for("SkylakeX", CpuIsa::Avx512), "");
  EXPECT_EQ(kdp::kernels::openblas_core_for("Prescott", CpuIsa::Baseline), "");
}

// What kdp-train prints here: empty, or the advice for this machine's BLAS.
TEST(OpenBlasCore, TheAdviceForThisMachineIsEmptyOrNamesTheCoreType) {
  const std::string advice = kdp::blas_kernel_advice();
  EXPECT_TRUE(advice.empty() || advice.find("OPENBLAS_CORETYPE=") != std::string::npos) << advice;
}
