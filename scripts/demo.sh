#!/usr/bin/env bash
# The main job: sets up and builds kdp, imports Fashion-MNIST into data/, trains
# a 784-256-256-10 MLP for 10 epochs on 2 MPI ranks, and prints the summary and
# where the checkpoint, the metrics and the plot are.
#
#   KDP_DEMO_RANKS (2), KDP_DEMO_EPOCHS (10, or 3 for the CNN) change the run;
#   KDP_DEMO_MODEL=cnn trains the pytorch/examples MNIST CNN instead, with its
#   recipe (Adadelta, lr 1.0, the lr times 0.7 every epoch, batch 64);
#   KDP_DEMO_PRECISION=bf16 (or auto) trains with bf16 products and fp32
#   weights, in runs/demo[-cnn]-bf16;
#   KDP_DEMO_MODEL=vit trains the reference vision transformer
#   vit(4,64,6,4,128) (AdamW, lr 1e-3, cosine schedule, batch 128, 15 epochs);
#   KDP_DEMO_MODEL=surrogate solves the 2-D heat equation for 1024 random
#   conductivities and sources into 4 HDF5 files (data/heat/, one per "job";
#   examples/06_surrogate.cpp), trains a CNN surrogate on them as one dataset,
#   and reports its error and speed-up against the solver on new samples.
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
vit)
  run=runs/demo-vit
  model=(--model "vit(4,64,6,4,128)" --epochs "${KDP_DEMO_EPOCHS:-15}" --batch-size 128
         --optimizer adamw --lr 1e-3 --scheduler cosine --log-every 100)
  ;;
surrogate)
  run=runs/demo-surrogate
  ;;
cnn)
  run=runs/demo-cnn
  model=(--model "conv(32,3),relu,conv(64,3),relu,maxpool(2),dropout(0.25),flatten,linear(128),relu,dropout(0.5),linear(10)"
         --epochs "${KDP_DEMO_EPOCHS:-3}" --batch-size 64 --optimizer adadelta --lr 1.0
         --scheduler step --step-size 1 --gamma 0.7 --log-every 200)
  ;;
*)
  echo "demo.sh: KDP_DEMO_MODEL is mlp, cnn, vit or surrogate, not '$KDP_DEMO_MODEL'" >&2
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
if [[ ${KDP_DEMO_MODEL:-mlp} == surrogate ]]; then
  # The example is built on demand (a demo build leaves the examples out).
  if ! cmake --build "$build_dir" --target example_06_surrogate -j "$(nproc)" 2>/dev/null; then
    cmake -S "$root" -B "$build_dir" -DKDP_ENABLE_EXAMPLES=ON >/dev/null
    cmake --build "$build_dir" --target example_06_surrogate -j "$(nproc)"
  fi
  surrogate=$build_dir/examples/06_surrogate
  if [[ ! -d data/heat ]]; then  # whole or not at all
    rm -rf data/heat.partial
    "$surrogate" generate data/heat.partial 4 256 32 1
    mv data/heat.partial data/heat
  fi
  mpirun "${mpi_flags[@]}" -np "${KDP_DEMO_RANKS:-2}" "$build_dir/tools/kdp-train" \
    --data 'data/heat/heat-*.h5' --inputs /fields --targets /temperature \
    --model 'conv(16,3,1,1),relu,conv(16,3,1,1),relu,conv(16,3,1,1),relu,conv(1,3,1,1)' \
    --epochs "${KDP_DEMO_EPOCHS:-20}" --batch-size 32 --lr 3e-3 --monitor val_r2 \
    --normalise channel --standardise-targets \
    --checkpoint-dir "$run/checkpoints" --metrics "$run/metrics.csv" --progress lines \
    --precision "$precision"
  "$surrogate" evaluate "$run/checkpoints/best.h5" 256 32
else
  mpirun "${mpi_flags[@]}" -np "${KDP_DEMO_RANKS:-2}" "$build_dir/tools/kdp-train" \
    --data data/fashion-mnist.h5 "${model[@]}" \
    --checkpoint-dir "$run/checkpoints" --metrics "$run/metrics.csv" --progress lines \
    --precision "$precision"
fi

plot=$(scripts/plot_metrics "$run/metrics.csv" "$run/metrics.png")
echo "plot: $plot"
