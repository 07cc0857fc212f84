// bf16 rounding on every instruction-set path, and the autocast guard.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_isa.hpp"
#include "kdp/kdp.hpp"
#include "kernels/native/bf16.hpp"

using namespace kdp;
using detail::CpuIsa;

namespace {

uint32_t bits(float v) {
  uint32_t u = 0;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

float from_bits(uint32_t u) {
  float v = 0.0f;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

// Round to nearest, ties to even, from the definition: the two bf16 values
// around v and the distance to each, in double.
uint16_t nearest_bf16(float v) {
  const uint32_t u = bits(v);
  if (std::isnan(v)) return static_cast<uint16_t>((u >> 16) | 0x40);
  if (std::isinf(v)) return static_cast<uint16_t>(u >> 16);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t down = u & 0xffff0000u, up = down + 0x10000u;
  // Above the largest bf16 the next value up is infinity, 2^128 away from 0.
  const double up_value = std::isinf(from_bits(up)) ? std::copysign(std::ldexp(1.0, 128), v)
                                                    : static_cast<double>(from_bits(up));
  const double dd = std::fabs(static_cast<double>(v) - from_bits(down));
  const double du = std::fabs(up_value - v);
  if (dd < du || (dd == du && ((down >> 16) & 1) == 0)) return static_cast<uint16_t>(down >> 16);
  return static_cast<uint16_t>(up >> 16);
}

std::vector<float> awkward_values() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          1.00390625f /* a tie */,
                          1.01171875f /* a tie that rounds up */,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          from_bits(0x7f800001u) /* a signalling NaN */,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          -1e-39f,
                          3.3895314e38f};
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 4000; ++i) v.push_back(from_bits(any(gen)));
  return v;
}

}  // namespace

TEST(Bf16, RoundsToNearestEvenOnEveryPath) {
  const std::vector<float> in = awkward_values();
  for (const float v : in) {
    ASSERT_EQ(detail::to_bf16(v), nearest_bf16(v)) << std::hex << bits(v);
  }
  const CpuIsa detected = detail::cpu_isa_detected();
  for (int level = 0; level <= static_cast<int>(detected); ++level) {
    const CpuIsa before = detail::set_cpu_isa_limit(static_cast<CpuIsa>(level));
    // Every length up to two vectors and beyond, so that tails are covered.
    for (const size_t n : {size_t{1}, size_t{15}, size_t{17}, size_t{33}, in.size()}) {
      std::vector<uint16_t> out(n, 0xdead);
      detail::to_bf16_host(in.data(), out.data(), static_cast<int64_t>(n));
      std::vector<float> rounded(n, 2.0f);
      detail::round_to_bf16_host(in.data(), rounded.data(), static_cast<int64_t>(n));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], nearest_bf16(in[i])) << detail::cpu_isa_name(static_cast<CpuIsa>(level))
                                               << " value " << std::hex << bits(in[i]);
        ASSERT_EQ(bits(rounded[i]), uint32_t{nearest_bf16(in[i])} << 16)
            << "round_to_bf16_host, " << detail::cpu_isa_name(static_cast<CpuIsa>(level))
            << " value " << std::hex << bits(in[i]);
      }
    }
    detail::set_cpu_isa_limit(before);
  }
}

TEST(CpuIsa, NamesAndTheCap) {
  EXPECT_EQ(detail::parse_cpu_isa("avx2"), CpuIsa::Avx2);
  EXPECT_THROW(detail::parse_cpu_isa("avx9000"), ValueError);
  const CpuIsa before = detail::set_cpu_isa_limit(CpuIsa::Baseline);
  EXPECT_EQ(detail::cpu_isa(), CpuIsa::Baseline);
  detail::set_cpu_isa_limit(before);
  EXPECT_LE(static_cast<int>(detail::cpu_isa()), static_cast<int>(detail::cpu_isa_detected()));
}

// bf16 products are taken for speed on AMX, and on AVX512_BF16 from AMD
// alone: the vendor as /proc/cpuinfo names it, the levels as the cap leaves
// them.
TEST(CpuIsa, Bf16DotsOutrunFp32OnAmxAndOnAmdsAvx512Bf16) {
  std::string vendor;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; vendor.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
  }
  const CpuIsa detected = detail::cpu_isa_detected();
  const bool amd = vendor == "AuthenticAMD";
  const CpuIsa before = detail::set_cpu_isa_limit(CpuIsa::Avx512);
  EXPECT_FALSE(detail::bf16_dots_outrun_fp32()) << "capped at avx512";
  detail::set_cpu_isa_limit(CpuIsa::Avx512Bf16);
  EXPECT_EQ(detail::bf16_dots_outrun_fp32(), detected >= CpuIsa::Avx512Bf16 && amd) << vendor;
  detail::set_cpu_isa_limit(CpuIsa::Amx);
  EXPECT_EQ(detail::bf16_dots_outrun_fp32(),
            detected >= CpuIsa::Amx || (detected >= CpuIsa::Avx512Bf16 && amd))
      << vendor;
  detail::set_cpu_isa_limit(before);
}

TEST(Autocast, IsScopedPerThreadAndResolvesAuto) {
  EXPECT_EQ(autocast_precision(), Precision::fp32);
  {
    autocast guard(Precision::bf16);
    EXPECT_EQ(autocast_precision(), Precision::bf16);
    {
      autocast off(Precision::bf16, /*enabled=*/false);
      EXPECT_EQ(autocast_precision(), Precision::bf16);  // disabled: the outer one holds
      autocast fp32(Precision::fp32);
      EXPECT_EQ(autocast_precision(), Precision::fp32);
    }
    EXPECT_EQ(autocast_precision(), Precision::bf16);
  }
  EXPECT_EQ(autocast_precision(), Precision::fp32);
  autocast guard(Precision::Auto);
  EXPECT_EQ(autocast_precision(), has_bf16_matrix_units() ? Precision::bf16 : Precision::fp32);
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_THROW(parse_precision("fp16"), ValueError);
}
