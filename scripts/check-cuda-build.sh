#!/usr/bin/env bash
# Configures and builds all of kdp (library, tests, examples, perf) against a
# CUDA build of Kokkos and Kokkos Kernels (scripts/build-kokkos.sh --backend
# cuda), and fails on any compile error or on any warning from kdp's own files.
# Nothing runs: a machine without a GPU can do this.
#
#   scripts/check-cuda-build.sh PREFIX [BUILD_DIR] [-- extra CMake arguments]
#
# PREFIX may also come from KDP_CUDA_KOKKOS_PREFIX. Without one, or when it holds
# no CUDA Kokkos, the script says so and exits 77 (CTest reports it skipped).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${1:-${KDP_CUDA_KOKKOS_PREFIX:-}}
build=${2:-$root/build-cuda}
shift $(($# > 2 ? 2 : $#))
[[ ${1:-} == -- ]] && shift
extra=("$@")

if [[ -z $prefix ]]; then
  echo "check-cuda-build: no CUDA Kokkos prefix given (argument or KDP_CUDA_KOKKOS_PREFIX); skipped"
  exit 77
fi
config=$prefix/lib/cmake/Kokkos/KokkosConfigCommon.cmake
if ! grep -qsE "set\(Kokkos_DEVICES .*CUDA" "$config" || [[ ! -x $prefix/bin/nvcc_wrapper ]]; then
  echo "check-cuda-build: $prefix holds no CUDA build of Kokkos (see scripts/build-kokkos.sh); skipped"
  exit 77
fi
arch=$(sed -nE 's/^set\(Kokkos_ARCH ([A-Z0-9_;]+)\)/\1/p' "$config" | tr ';' '\n' |
  grep -E '^(HOPPER90|ADA89|AMPERE80|AMPERE86|BLACKWELL100)$' | head -1)
sm=$(sed -nE 's/^HOPPER90$/90/p; s/^ADA89$/89/p; s/^AMPERE80$/80/p; s/^AMPERE86$/86/p; s/^BLACKWELL100$/100/p' <<<"$arch")

echo "check-cuda-build: kdp against $prefix ($(nvcc --version | sed -nE 's/.*release ([0-9.]+).*/nvcc \1/p'), ${arch:-architecture unknown})"
start=$SECONDS
mkdir -p "$build"
# nvcc_wrapper before Kokkos 4.7.01 defaults to sm_70, which nvcc 13 refuses in
# CMake's compiler checks: name the architecture.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$prefix/bin/nvcc_wrapper" ${sm:+"-DCMAKE_CXX_FLAGS=-arch=sm_$sm"} \
  -DKDP_CUDA_KOKKOS_PREFIX= "${extra[@]}" >"$build/configure.log" 2>&1 ||
  { tail -30 "$build/configure.log"; echo "check-cuda-build: configure failed"; exit 1; }
grep -E "kdp: (Kokkos flavour|CUDA backend)" "$build/configure.log"
cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1
status=$?
elapsed=$((SECONDS - start))

# kdp's own files: under the source root, not in the build tree's generated code.
own_warnings=$(grep -E "warning" "$build/build.log" | grep -F "$root/" | grep -vF "$build/" | sort -u)
if [[ $status -ne 0 ]]; then
  grep -E "error" "$build/build.log" | sort -u | head -40
  echo "check-cuda-build: the build failed after $elapsed s (log: $build/build.log)"
  exit 1
fi
if [[ -n $own_warnings ]]; then
  echo "$own_warnings" | head -40
  echo "check-cuda-build: $(wc -l <<<"$own_warnings") warning(s) in kdp's files (log: $build/build.log)"
  exit 1
fi
echo "check-cuda-build: built with no warning from kdp's files in $elapsed s ($(nproc) cores)"
