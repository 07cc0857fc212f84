// libFuzzer entry point for kdp::fuzz::hdf5_dataset (see fuzz_targets.hpp).
#include "fuzz_targets.hpp"
#include "kdp/core/runtime.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kdp::Runtime* runtime = [] {
    kdp::RuntimeOptions o;
    o.init_mpi = false;
    return new kdp::Runtime(o);  // lives as long as the fuzzer
  }();
  (void)runtime;
  return kdp::fuzz::hdf5_dataset(data, size);
}
