#!/usr/bin/env bash
# The main job: sets up and builds kdp, imports Fashion-MNIST into data/, trains
# a 784-256-256-10 MLP for 10 epochs on 2 MPI ranks, and prints the summary and
# where the checkpoint, the metrics and the plot are.
#
#   KDP_DEMO_RANKS (2), KDP_DEMO_EPOCHS (10, or 3 for the CNN) change the run;
#   KDP_DEMO_MODEL=cnn trains the pytorch/examples MNIST CNN instead, with its
#   recipe (Adadelta, lr 1.0, the lr times 0.7 every epoch, batch 64);
#   KDP_DEMO_PRECISION=bf16 (or auto) trains with bf16 products and fp32
#   weights, in runs/demo[-cnn]-bf16.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh" --demo
build_dir=${KDP_BUILD_DIR:-$root/build}
cd "$root"

if [[ ! -f data/fashion-mnist.h5 ]]; then
  mkdir -p data
  "$build_dir/tools/kdp-data" import-fashion-mnist --out data/fashion-mnist.h5
fi

case ${KDP_DEMO_MODEL:-mlp} in
mlp)
  run=runs/demo
  model=(--model 784,256,256,10 --epochs "${KDP_DEMO_EPOCHS:-10}" --batch-size 128
         --optimizer adam --lr 1e-3 --scheduler cosine)
  ;;
cnn)
  run=runs/demo-cnn
  model=(--model "conv(32,3),relu,conv(64,3),relu,maxpool(2),dropout(0.25),flatten,linear(128),relu,dropout(0.5),linear(10)"
         --epochs "${KDP_DEMO_EPOCHS:-3}" --batch-size 64 --optimizer adadelta --lr 1.0
         --scheduler step --step-size 1 --gamma 0.7 --log-every 200)
  ;;
*)
  echo "demo.sh: KDP_DEMO_MODEL is mlp or cnn, not '$KDP_DEMO_MODEL'" >&2
  exit 2
  ;;
esac
precision=${KDP_DEMO_PRECISION:-fp32}
case $precision in
fp32) ;;
bf16 | auto) run=$run-$precision ;;
*)
  echo "demo.sh: KDP_DEMO_PRECISION is fp32, bf16 or auto, not '$precision'" >&2
  exit 2
  ;;
esac
rm -rf "$run"
mkdir -p "$run"
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
mpirun "${mpi_flags[@]}" -np "${KDP_DEMO_RANKS:-2}" "$build_dir/tools/kdp-train" \
  --data data/fashion-mnist.h5 "${model[@]}" \
  --checkpoint-dir "$run/checkpoints" --metrics "$run/metrics.csv" --progress lines \
  --precision "$precision"

plot=$(scripts/plot_metrics "$run/metrics.csv" "$run/metrics.png")
echo "plot: $plot"
