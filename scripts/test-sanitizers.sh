#!/usr/bin/env bash
# Builds the test suites with AddressSanitizer and UndefinedBehaviorSanitizer
# in build-sanitizers/ and runs them (the MPI suites at 2 ranks too). Any
# sanitizer report fails the run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-packages.sh" "$root/scripts/packages.txt" "$root/scripts/test-packages.txt"
build=${KDP_SANITIZER_BUILD_DIR:-$root/build-sanitizers}
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKDP_ENABLE_SANITIZERS=ON \
    -DKDP_ENABLE_EXAMPLES=OFF -DKDP_ENABLE_TOOLS=OFF -DKDP_ENABLE_PERF=OFF
fi
cmake --build "$build" -j "$(nproc)"
# Open MPI, HDF5 and Kokkos keep process-lifetime allocations: leaks are not
# reported; every other finding aborts the test.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cd "$build"
ctest --output-on-failure -j "$(nproc)" -L "unit|mpi" -E "np3$" "$@"
# A sanitized kdp, installed, links into a project of its own.
ctest --output-on-failure -R '^install_and_use$' "$@"
