#!/usr/bin/env bash
# kdp's performance suite: sets up and builds, runs every benchmark (MPI ones at
# 1 and 2 ranks), writes perf/results/<time>/{results.json,report.md,*.png},
# compares the ratios with perf/baseline.json and exits non-zero on a
# regression beyond the tolerance it prints.
#
#   scripts/perf.sh [--update-baseline] [--tolerance 0.25] [--quick]
#   scripts/perf.sh --baseline-from perf/results/*/results.json   # median of runs
#   KDP_PERF_OUT=DIR scripts/perf.sh      # results elsewhere
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/install-packages.sh" "$root/scripts/perf-packages.txt" ||
  echo "perf.sh: the peer packages could not be installed; the suite skips the PyTorch rows"
args=(--build "${KDP_BUILD_DIR:-$root/build}")
[[ -n ${KDP_PERF_OUT:-} ]] && args+=(--out "$KDP_PERF_OUT")
exec /usr/bin/python3 "$root/perf/run_suite.py" "${args[@]}" "$@"
