#!/usr/bin/env bash
# Sets up and builds kdp, then runs every test (MPI ones included).
# Extra arguments go to ctest, e.g. `scripts/test.sh -L mpi` or `-R Linear`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
cd "${KDP_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "$(nproc)" "$@"
