#!/usr/bin/env bash
# Fuzzes one of kdp's file readers with libFuzzer for a while:
#
#   scripts/fuzz.sh idx_reader|hdf5_dataset|checkpoint_loader SECONDS
#
# Builds kdp with clang, AddressSanitizer and libFuzzer in build-fuzz/, starts
# from the seed corpus in tests/fuzz/corpus/TARGET, and writes any input that
# crashes, hangs or runs out of memory to tests/fuzz/regressions/TARGET/, which
# CTest replays from then on (commit it with the fix).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${1:?usage: fuzz.sh idx_reader|hdf5_dataset|checkpoint_loader SECONDS}
seconds=${2:-60}
case $target in idx_reader | hdf5_dataset | checkpoint_loader) ;; *)
  echo "fuzz.sh: unknown target '$target'" >&2
  exit 2
  ;;
esac
"$root/scripts/install-packages.sh" "$root/scripts/packages.txt"
"$root/scripts/install-packages.sh" <(printf 'clang\nlibclang-rt-14-dev\n')
build=${KDP_FUZZ_BUILD_DIR:-$root/build-fuzz}
if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKDP_ENABLE_FUZZING=ON -DKDP_ENABLE_TESTS=OFF -DKDP_ENABLE_EXAMPLES=OFF -DKDP_ENABLE_PERF=OFF
fi
cmake --build "$build" -j "$(nproc)" --target "fuzz_$target"
corpus=$build/corpus/$target
mkdir -p "$corpus" "$root/tests/fuzz/regressions/$target"
cp -n "$root/tests/fuzz/corpus/$target"/* "$corpus"/ 2>/dev/null || true
# Leaks of HDF5's and Kokkos' process-lifetime state are not findings.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1} \
  "$build/tests/fuzz/fuzz_$target" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 \
  -timeout=10 -artifact_prefix="$root/tests/fuzz/regressions/$target/" -print_final_stats=1
