#!/usr/bin/env bash
# kdp seen by a Kokkos Tools connector (region_recorder.cpp): one training
# step of kdp-train on 2 ranks with a checkpoint opens the regions README's
# "Profiling" names, nested as they run (layers and ops inside forward, ops'
# backward inside backward, DDP's phases inside backward with
# --no-reproducible, the exact sum's exchange inside it in reproducible mode),
# every region closed, and every allocation labelled. (Gradient hooks fire as a leaf's
# gradient is accumulated: DDP's buckets become ready there.)
#
#   kokkos_tools_regions.sh TOOLS_DIR TESTS_SOURCE_DIR CONNECTOR ENV_VARIABLE
set -uo pipefail
bin=$1 src=$2 connector=$3 variable=$4
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
make_tiny_data
cd "$work" || fail "work directory"
# regions MODE PATH...: one step in MODE; each rank's file has every PATH.
regions() {
  local mode=$1 f want
  shift
  rm -f "$work"/regions.*
  export KDP_REGIONS_OUT=$work/regions
  timeout 120 mpirun "${mpi_flags[@]}" -x "$variable=$connector" -x KDP_REGIONS_OUT -np 2 \
    "$bin/kdp-train" --data "$work/tiny.h5" --model 784,32,10 --batch-size 40 --threads 1 \
    --seed 5 --progress lines --epochs 1 --max-steps 1 --checkpoint-dir "ckpt$mode" "$mode" \
    >run.log 2>&1 || { cat run.log; fail "the run with the connector ($mode)"; }
  files=("$work"/regions.*)
  [[ ${#files[@]} -eq 2 && -s ${files[0]} ]] ||
    { cat run.log; fail "the connector did not write one file per rank: ${files[*]}"; }
  for f in "${files[@]}"; do
    if grep -q "^unbalanced" "$f"; then fail "$f: $(grep '^unbalanced' "$f")"; fi
    # Each path: a region inside its parents, outermost first.
    for want in "$@"; do
      grep -qE "^region (.* / )?$want$" "$f" || {
        sed -n 's/^region //p' "$f"
        fail "$f ($mode) has no region path ending in '$want'"
      }
    done
    # Kokkos' own allocations are labelled by Kokkos; kdp's all are labelled.
    if grep -qE "^allocation ?$" "$f"; then fail "$f: an allocation without a label"; fi
    grep -q "^allocation kdp::CachingAllocator::block$" "$f" || fail "$f: no labelled tensor memory"
  done
}
common=("kdp::data::wait"
        "kdp::train::forward / kdp::nn::Linear / kdp::linear_relu"
        "kdp::train::forward / kdp::nn::Linear / kdp::linear"
        "kdp::train::forward / kdp::cross_entropy"
        "kdp::train::backward / kdp::autograd::backward / kdp::linear_relu backward"
        "kdp::train::backward / kdp::autograd::backward / kdp::cross_entropy backward"
        "kdp::train::optimizer"
        "kdp::train::checkpoint")
regions --no-reproducible "${common[@]}" \
  "kdp::train::backward / kdp::autograd::backward / kdp::AccumulateGrad backward / kdp::ddp::bucket ready" \
  "kdp::ddp::finish / kdp::ddp::reduction wait"
regions --reproducible "${common[@]}" "kdp::train::exact_sum / kdp::train::exact_sum allgather rows" \
  "kdp::train::exact_sum / kdp::train::exact_sum allgather"
echo "ok: $(grep -c '^region' "${files[0]}") region paths, $(grep -c '^allocation' "${files[0]}") allocation labels on rank 0"
