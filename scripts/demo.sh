#!/usr/bin/env bash
# The main job: sets up and builds kdp, imports Fashion-MNIST into data/, trains
# a 784-256-256-10 MLP for 10 epochs on 2 MPI ranks, and prints the summary and
# where the checkpoint, the metrics and the plot are.
#
#   KDP_DEMO_RANKS (2), KDP_DEMO_EPOCHS (10) change the run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
build_dir=${KDP_BUILD_DIR:-$root/build}
cd "$root"

if [[ ! -f data/fashion-mnist.h5 ]]; then
  mkdir -p data
  "$build_dir/examples/kdp-data" import-fashion-mnist --out data/fashion-mnist.h5
fi

run=runs/demo
rm -rf "$run"
mkdir -p "$run"
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
mpirun "${mpi_flags[@]}" -np "${KDP_DEMO_RANKS:-2}" "$build_dir/examples/kdp-train" \
  --data data/fashion-mnist.h5 --model 784,256,256,10 --epochs "${KDP_DEMO_EPOCHS:-10}" \
  --batch-size 128 --optimizer adam --lr 1e-3 --scheduler cosine \
  --checkpoint-dir "$run/checkpoints" --metrics "$run/metrics.csv" --progress lines

plot=$(scripts/plot_metrics "$run/metrics.csv" "$run/metrics.png")
echo "plot: $plot"
