// libFuzzer entry point for one kdp::fuzz target (see fuzz_targets.hpp); CMake
// builds it once per target with KDP_FUZZ_TARGET naming the function.
#include "fuzz_targets.hpp"
#include "kdp/core/runtime.hpp"

#ifndef KDP_FUZZ_TARGET
#error "KDP_FUZZ_TARGET names the kdp::fuzz function to run"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kdp::Runtime* runtime = [] {
    kdp::RuntimeOptions o;
    o.init_mpi = false;
    return new kdp::Runtime(o);  // lives as long as the fuzzer
  }();
  (void)runtime;
  return kdp::fuzz::KDP_FUZZ_TARGET(data, size);
}
