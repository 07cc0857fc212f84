#!/usr/bin/env bash
# Installs the Debian packages kdp needs (only those missing), then configures
# and builds kdp in build/ (Release). Safe to run again: it only does what changed.
#
#   scripts/setup.sh           everything: library, tools, tests, benchmarks,
#                              examples, with the tests' packages too
#   scripts/setup.sh --demo    what the demo runs: the library and the tools
#                              (kdp-train, kdp-data), with their packages only;
#                              a later full setup adds the rest to the same build
#
#   KDP_BUILD_DIR     build directory (default: build)
#   KDP_CMAKE_ARGS    extra arguments for the first configure
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${KDP_BUILD_DIR:-$root/build}
demo=0
case ${1:-} in
--demo) demo=1 ;;
"") ;;
*) echo "setup.sh: unknown argument '$1' (--demo, or nothing)" >&2; exit 2 ;;
esac

lists=("$root/scripts/packages.txt")
((demo)) || lists+=("$root/scripts/test-packages.txt")
"$root/scripts/install-packages.sh" "${lists[@]}"

# A build the demo configured (the marker) lacks the tests, benchmarks and
# examples: a full setup turns them on in the same directory.
marker=$build_dir/kdp-demo-only
parts=(-DKDP_ENABLE_TESTS=ON -DKDP_ENABLE_PERF=ON -DKDP_ENABLE_EXAMPLES=ON)
((demo)) && parts=(-DKDP_ENABLE_TESTS=OFF -DKDP_ENABLE_PERF=OFF -DKDP_ENABLE_EXAMPLES=OFF)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${parts[@]}" ${KDP_CMAKE_ARGS:-}
  if ((demo)); then : >"$marker"; fi
elif ((!demo)) && [[ -f $marker ]]; then
  cmake -S "$root" -B "$build_dir" "${parts[@]}"
  rm -f "$marker"
fi
if ((demo)); then
  cmake --build "$build_dir" -j "$(nproc)" --target kdp-train kdp-data
else
  cmake --build "$build_dir" -j "$(nproc)"
fi
