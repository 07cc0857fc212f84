#!/usr/bin/env bash
# Installs the Debian packages kdp needs (only those missing), then configures
# and builds kdp in build/ (Release). Safe to run again: it only does what changed.
#
#   KDP_BUILD_DIR     build directory (default: build)
#   KDP_CMAKE_ARGS    extra arguments for the first configure
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${KDP_BUILD_DIR:-$root/build}

"$root/scripts/install-packages.sh" "$root/scripts/packages.txt"

if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${KDP_CMAKE_ARGS:-}
fi
cmake --build "$build_dir" -j "$(nproc)"
