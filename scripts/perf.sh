#!/usr/bin/env bash
# kdp's performance suite: sets up and builds, runs every benchmark (MPI ones at
# 1 and 2 ranks), writes perf/results/<time>/{results.json,report.md,*.png},
# compares the ratios with this machine kind's baseline
# (perf/baselines/<cpu>-<cores>c-<backend>.json; the first run records it) and
# exits non-zero on a regression beyond the tolerance it prints. The PyTorch and Lightning peers run
# from a virtual environment outside the tree (scripts/peers-venv.sh).
#
#   scripts/perf.sh [--update-baseline] [--tolerance 0.25] [--absolute-tolerance 0.02] [--quick]
#   scripts/perf.sh --only reproducible_ 'peer_kdp' ...   # the runs whose names match
#   scripts/perf.sh --list [--only ...]                   # the runs' names
#   scripts/perf.sh --extra               # also the information-only runs a full run leaves out
#   scripts/perf.sh --baseline-from perf/results/*/results.json   # median of runs
#
# The suite imports data/fashion-mnist.h5 itself before the first run that
# reads it. A run it meant to make that cannot happen (a program not built, no
# data) fails it; one this machine cannot make (no network namespaces for the
# emulated cluster, no PyTorch for the peers) is listed as not run.
#   KDP_PERF_OUT=DIR scripts/perf.sh      # results elsewhere
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/install-packages.sh" "$root/scripts/perf-packages.txt" ||
  echo "perf.sh: the peer packages could not be installed; the suite skips the PyTorch rows"
args=(--build "${KDP_BUILD_DIR:-$root/build}" --peer-python "$("$root/scripts/peers-venv.sh")")
[[ -n ${KDP_PERF_OUT:-} ]] && args+=(--out "$KDP_PERF_OUT")
exec /usr/bin/python3 "$root/perf/run_suite.py" "${args[@]}" "$@"
