#!/usr/bin/env bash
# kdp-train --reproducible: with the same seed, global batch and data, the
# weights, optimizer state and metrics (the loss and accuracy of every step
# row and epoch row) after 30 steps (across an epoch's end, whose
# last batch of 2 samples leaves ranks without a share) are the same bits at
# 1 x 1, 1 x 2, 1 x 4, 2 x 1, 2 x 2, 3 x 1 and 4 x 1 ranks x devices, and at one rank
# with 2 threads (also with products the BLAS splits over its threads, and a
# convolution); in bf16 (in one pass on a CPU with AVX2), with
# gradient accumulation, dropout, BatchNorm and SyncBatchNorm too; a run stopped at 4 ranks and resumed at 3 ends with them
# too.
#
#   reproducible.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
# shellcheck source=common.sh
source "$src/reliability/common.sh"
make_uneven_data
cd "$work" || fail "work directory"
plain=("$bin/kdp-train" --data "$work/uneven.h5" --model 784,16,10 --batch-size 24 --seed 3
       --progress lines --log-every 1000 --epochs 2)
train=("${plain[@]}" --reproducible)

# run NAME RANKS [kdp-train options...]: its checkpoints in NAME/, its metrics
# (a row every 5 steps) in NAME.csv.
run() {
  local name=$1 ranks=$2
  shift 2
  rm -f "$work/$name.csv"
  timeout 120 mpirun "${mpi_flags[@]}" -np "$ranks" "${train[@]}" --checkpoint-dir "$work/$name" \
    --metrics "$work/$name.csv" --log-every 5 "$@" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "the $name run"; }
}

# The metrics of NAME.csv that training computes (not its timings): epoch,
# step, loss, accuracy, lr, val_loss, val_accuracy, ...
metrics() {
  cut -d, -f1-6,10- "$work/$1.csv"
}

# same_state REFERENCE STEP WHAT "NAME RANKS [EXTRA...]"... -- [kdp-train options...]:
# runs each layout with the options and its extra ones, and checks that its
# state after STEP steps is the REFERENCE run's.
same_state() {
  local reference=$1 step=$2 what=$3 layouts=() file want layout name ranks extra
  shift 3
  while [[ $1 != -- ]]; do
    layouts+=("$1")
    shift
  done
  shift
  file=$(printf 'ckpt-%09d.h5' "$step")
  want=$(state_digest "$reference/$file")
  for layout in "${layouts[@]}"; do
    read -r name ranks extra <<<"$layout"
    # shellcheck disable=SC2086
    run "$name" "$ranks" "$@" $extra
    [[ $(state_digest "$name/$file") == "$want" ]] ||
      fail "$name$what: the state after $step steps differs from $reference's"
    diff <(metrics "$reference") <(metrics "$name") >/dev/null ||
      fail "$name$what: the metrics differ from $reference's: $(diff <(metrics "$reference") <(metrics "$name") | head -4)"
  done
}

run 1x1 1 --threads 1 --max-steps 30
want=$(state_digest 1x1/ckpt-000000030.h5)
same_state 1x1 30 "" "1x2 1 --devices 2" "1x4 1 --devices 4" "2x1 2" "2x2 2 --devices 2" "3x1 3" \
  "4x1 4" "1x1t2 1 --threads 2" -- --threads 1 --max-steps 30
echo "ok: the same weights and optimizer state after 30 steps at 1x1, 1x2, 1x4, 2x1, 2x2, 3x1, 4x1 and 1 rank x 2 threads"

# Products large enough to be split over a rank's threads (the MLP's by
# row_gemm's blocks, the convolution's by the BLAS or oneDNN where the build
# has it): the same state at 1 and 2 threads and at 2 ranks. (For the
# convolution only a threaded BLAS, such as the OpenBLAS that
# scripts/packages.txt installs, could tell 1 thread from 2 here.)
for tagged in mlp:784,256,10 'conv:conv(8,3,1,1),relu,maxpool(2),flatten,linear(10)'; do
  tag=${tagged%%:*} model=${tagged#*:}
  wide=(--model "$model" --batch-size 240 --max-steps 5)
  run "${tag}t1" 1 "${wide[@]}" --threads 1
  same_state "${tag}t1" 5 " ($model)" "${tag}t2 1 --threads 2" "${tag}2x1 2 --threads 1" -- "${wide[@]}"
done
echo "ok: products on the BLAS and a convolution: the same state at 1 thread, 2 threads and 2 ranks"

# bf16 under autocast: in one pass where the CPU has AVX2 (row_gemm_bf16:
# AVX512_BF16's dot products, or fp32 chains of the rounded operands in their
# order), else shard by shard; the same state at every layout either way,
# with products split over a rank's threads and with dropout. Capped below
# AVX2, the shards go one by one.
bf_model=(--model 'flatten,linear(256),relu,dropout(0.2),linear(10)' --batch-size 240 --max-steps 5)
bf16=(--precision bf16 "${bf_model[@]}")
run bf1x1 1 "${bf16[@]}" --threads 1
run bffp32 1 "${bf_model[@]}" --threads 1
grep -Eq "reproducible mode on: .*\(shards (in one pass|one by one)\)" bf1x1.log ||
  { head -3 bf1x1.log; fail "bf16: the log does not say how the shards go"; }
[[ -f bffp32/ckpt-000000005.h5 && $(state_digest bf1x1/ckpt-000000005.h5) != "$(state_digest bffp32/ckpt-000000005.h5)" ]] ||
  fail "bf16 gave fp32's state: --precision bf16 changed nothing"
same_state bf1x1 5 " in bf16" "bf1x2 1 --devices 2" "bf2x1 2" "bf2x2 2 --devices 2" "bf3x1 3" \
  "bf4x1 4" "bf1x1t2 1 --threads 2" -- "${bf16[@]}" --threads 1
KDP_MAX_CPU_ISA=baseline run bfcapped 1 "${bf16[@]}" --threads 1
grep -q "(shards one by one)" bfcapped.log || { head -3 bfcapped.log; fail "bf16 without AVX2: not one by one"; }
# Ranks on CPUs of two kinds (here one capped below AVX2) agree on one
# way for the shards: every rank one by one, and the run ends.
for capped in 0 1; do
  rm -rf "$work/bfmixed"
  ranks=("$bin/kdp-train" "$bin/kdp-train")
  ranks[capped]="env KDP_MAX_CPU_ISA=baseline $bin/kdp-train"
  # shellcheck disable=SC2086
  timeout 120 mpirun "${mpi_flags[@]}" -np 1 ${ranks[0]} "${train[@]:1}" "${bf16[@]}" --threads 1 \
    --checkpoint-dir "$work/bfmixed" : -np 1 ${ranks[1]} "${train[@]:1}" "${bf16[@]}" --threads 1 \
    --checkpoint-dir "$work/bfmixed" >bfmixed.log 2>&1 || { cat bfmixed.log; fail "bf16 on two kinds of CPU (rank $capped capped)"; }
  grep -q "(shards one by one)" bfmixed.log || { head -3 bfmixed.log; fail "bf16 on two kinds of CPU (rank $capped capped): not one by one"; }
  [[ -f bfmixed/ckpt-000000005.h5 ]] || fail "bf16 on two kinds of CPU (rank $capped capped): no checkpoint"
done
echo "ok: in bf16 ($(grep -o "shards [a-z ]*)" bf1x1.log | head -1), the same state after 5 steps at 1x1, 1x2, 2x1, 2x2, 3x1, 4x1 and 1 rank x 2 threads; one by one on every rank where one rank's CPU lacks AVX2"

# Gradient accumulation: 3 micro-batches per step (an epoch's last step has
# fewer), summed in their order at every layout.
run acc1x1 1 --threads 1 --max-steps 10 --accumulate 3
want_acc=$(state_digest acc1x1/ckpt-000000010.h5)
run noacc 1 --threads 1 --max-steps 10
[[ -f noacc/ckpt-000000010.h5 && $want_acc != "$(state_digest noacc/ckpt-000000010.h5)" ]] ||
  fail "--accumulate 3 changed nothing"
same_state acc1x1 10 " with --accumulate 3" "acc2x1 2" "acc3x1 3" "acc2x2 2 --devices 2" -- \
  --threads 1 --max-steps 10 --accumulate 3
echo "ok: with 3 micro-batches per step, the same state after 10 steps at 1x1, 2x1, 3x1 and 2x2"

# Dropout: each sample's mask is drawn from its index and the step.
dropout=(--model 'flatten,linear(16),relu,dropout(0.3),linear(10)' --threads 1 --max-steps 10)
run drop1x1 1 "${dropout[@]}"
want_drop=$(state_digest drop1x1/ckpt-000000010.h5)
run drop1x1again 1 "${dropout[@]}" --model 'flatten,linear(16),relu,dropout(0.0),linear(10)'
[[ -f drop1x1again/ckpt-000000010.h5 && $want_drop != "$(state_digest drop1x1again/ckpt-000000010.h5)" ]] ||
  fail "dropout changed nothing"
same_state drop1x1 10 " with dropout" "drop2x1 2" "drop4x1 4" "drop2x2 2 --devices 2" -- "${dropout[@]}"
echo "ok: with dropout, the same state after 10 steps at 1x1, 2x1, 4x1 and 2x2"

# BatchNorm: each shard normalises with its own statistics; the running
# statistics advance shard by shard in the shards' order, summed exactly.
# (602 samples in batches of 48: the last one of 26 fills every shard with 2.)
bn=(--model 'flatten,linear(16),batchnorm,relu,linear(10)' --threads 1 --max-steps 16
    --batch-size 48)
run bn1x1 1 "${bn[@]}"
same_state bn1x1 16 " with BatchNorm (running statistics included)" "bn2x1 2" "bn3x1 3" \
  "bn2x2 2 --devices 2" -- "${bn[@]}"
/usr/bin/python3 - <<'PY' || fail "the running statistics did not move"
import h5py, numpy as np
with h5py.File("bn1x1/ckpt-000000016.h5") as f:
    m = f["model/2.running_mean"][()]
    assert np.abs(m).max() > 1e-3 and int(f["model/2.num_batches_tracked"][()]) == 16 * 12, m
PY
"${train[@]}" "${bn[@]}" --batch-size 24 >bn24.log 2>&1 && fail "shards of one sample were accepted"
grep -q "end with a batch of 2" bn24.log || { cat bn24.log; fail "shards of one sample: no clear message"; }
echo "ok: with BatchNorm, the same state and running statistics after 16 steps (across the epoch's end) at 1x1, 2x1, 3x1 and 2x2; a last batch of 2 refused"

# SyncBatchNorm: a rank's shards go forward together, each through a copy of
# the model, and the layer's statistics (and their gradients) are summed over
# every shard of every rank exactly: the whole global batch's, one update of
# the running statistics per micro-batch, the same bits at every layout.
sbn_model=(--model 'flatten,linear(16),batchnorm,relu,dropout(0.2),linear(10)' --sync-batchnorm
           --threads 1 --batch-size 48)
sbn=("${sbn_model[@]}" --max-steps 16)
run sbn1x1 1 "${sbn[@]}"
want_sbn=$(state_digest sbn1x1/ckpt-000000016.h5)
same_state sbn1x1 16 " with SyncBatchNorm" "sbn2x1 2" "sbn3x1 3" "sbn4x1 4" "sbn2x2 2 --devices 2" \
  "sbn1x1t2 1 --threads 2" -- "${sbn[@]}"
# Stopped at 4 ranks after 6 steps, resumed at 3 (mid-epoch).
run sbnstopped 4 "${sbn_model[@]}" --max-steps 6
run sbnstopped 3 "${sbn[@]}" --resume auto
grep -q "written by 4 rank(s)" sbnstopped.log || { cat sbnstopped.log; fail "the SyncBatchNorm run did not resume"; }
[[ $(state_digest sbnstopped/ckpt-000000016.h5) == "$want_sbn" ]] ||
  fail "SyncBatchNorm, stopped at 4 ranks and resumed at 3: the state differs from the uninterrupted run's"
# With 3 micro-batches per step (the 2 epochs give 10 steps): each
# micro-batch's statistics, at any layout.
run sbnacc1x1 1 "${sbn[@]}" --accumulate 3
same_state sbnacc1x1 10 " with SyncBatchNorm and --accumulate 3" "sbnacc2x2 2 --devices 2" -- \
  "${sbn[@]}" --accumulate 3
# Without dropout, against the default mode's SyncBatchNorm (one device, the
# whole batch's statistics: the same numbers up to rounding) and the
# reproducible mode's plain BatchNorm (each shard's own statistics).
nodrop=(--model 'flatten,linear(16),batchnorm,relu,linear(10)' --threads 1 --max-steps 16 --batch-size 48
        --seed 3 --data "$work/uneven.h5" --progress lines --log-every 1000 --epochs 2)
for variant in "whole --sync-batchnorm" "sharded --reproducible" "exact --reproducible --sync-batchnorm"; do
  read -r name extra <<<"$variant"
  # shellcheck disable=SC2086
  "$bin/kdp-train" "${nodrop[@]}" $extra --checkpoint-dir "$work/$name" >"$name.log" 2>&1 ||
    { cat "$name.log"; fail "the $name run"; }
done
/usr/bin/python3 - <<'PY' || fail "reproducible SyncBatchNorm does not normalise with the whole batch's statistics"
import h5py, numpy as np
step = "ckpt-000000016.h5"
whole, sharded, exact = (h5py.File(f"{n}/{step}")["model"] for n in ("whole", "sharded", "exact"))
# The layers after the normalisation (the bias before it has no gradient but
# rounding, which Adam scales up).
for k in ("2.weight", "2.bias", "4.weight", "4.bias", "2.running_var"):
    near = np.abs(exact[k][()] - whole[k][()]).max()
    far = np.abs(sharded[k][()] - whole[k][()]).max()
    assert near < 1e-5 and far > 1e-4, (k, near, far)
assert int(exact["2.num_batches_tracked"][()]) == 16, exact["2.num_batches_tracked"][()]
PY
echo "ok: with SyncBatchNorm, the same state after 16 steps at 1x1, 2x1, 3x1, 4x1, 2x2, 2 threads and stopped at 4 ranks and resumed at 3 (and 1x1 and 2x2 with 3 micro-batches per step); the whole batch's statistics"

# Fewer shards (cheaper): the same bits at the rank counts that divide them.
run s4x1x1 1 --threads 1 --max-steps 10 --shards 4
same_state s4x1x1 10 " with --shards 4" "s4x2x1 2" "s4x4x1 4" "s4x2x2 2 --devices 2" -- \
  --threads 1 --max-steps 10 --shards 4
timeout 60 mpirun "${mpi_flags[@]}" -np 3 "${train[@]}" --shards 4 --max-steps 1 >s4x3.log 2>&1 &&
  fail "3 ranks were accepted with 4 shards"
grep -q "reproducible mode cuts each batch into 4 shards, which 3 ranks cannot share" s4x3.log ||
  { cat s4x3.log; fail "3 ranks with 4 shards: no clear message"; }
"$bin/kdp-train" --data "$work/uneven.h5" --shards 4 --no-reproducible --max-steps 1 >s4plain.log 2>&1 &&
  fail "--shards with --no-reproducible was accepted"
grep -q "applies in reproducible mode only" s4plain.log ||
  { cat s4plain.log; fail "--shards with --no-reproducible: no clear message"; }
"${train[@]}" --shards 25 --max-steps 1 >s25.log 2>&1 && fail "more shards than samples per batch were accepted"
grep -q "exceeds the global batch of 24 samples" s25.log || { cat s25.log; fail "--shards 25: no clear message"; }
echo "ok: with --shards 4, the same state at 1x1, 2x1, 4x1 and 2x2; 3 ranks, --shards with --no-reproducible and more shards than samples refused"

# Without --reproducible or --no-reproducible the mode is off (DDP's
# exchange): at 1x1 the same state as --no-reproducible's, and the log says
# why and which option asks for it. The reason is what stands in the mode's
# way where something does: a comm hook, a rank count that does not divide
# the shards, several devices, BatchNorm, SyncBatchNorm, a model whose shards
# would go one by one (a convolution, bf16); else its cost.
timeout 120 "${plain[@]}" --no-reproducible --threads 1 --max-steps 30 --checkpoint-dir "$work/ddp1" \
  >ddp1.log 2>&1 || { cat ddp1.log; fail "the --no-reproducible run"; }
timeout 120 "${plain[@]}" --threads 1 --max-steps 30 --checkpoint-dir "$work/auto1" >auto1.log 2>&1 ||
  { cat auto1.log; fail "the auto1 run"; }
grep -q "reproducible mode off: its products cost up to 1.8x DDP's step at 2 threads a rank on some CPUs (--reproducible asks for it)" \
  auto1.log || { cat auto1.log; fail "auto1: the mode is not said to be off, with its cost"; }
[[ $(state_digest auto1/ckpt-000000030.h5) == "$(state_digest ddp1/ckpt-000000030.h5)" ]] ||
  fail "auto1: by default the state after 30 steps differs from --no-reproducible's"
[[ $(state_digest auto1/ckpt-000000030.h5) != "$want" ]] ||
  fail "auto1: the default and --reproducible give the same state: the check above cannot tell the modes apart"
# off RANKS WHY [kdp-train options...]: one step, the mode off for WHY.
off() {
  local ranks=$1 why=$2
  shift 2
  timeout 60 mpirun "${mpi_flags[@]}" -np "$ranks" "${plain[@]}" --max-steps 1 "$@" >off.log 2>&1 ||
    { cat off.log; fail "a run with $* did not train"; }
  grep -q "reproducible mode off.*$why" off.log || { cat off.log; fail "$*: not '$why'"; }
}
off 2 "the comm hook bf16 reduces the gradients instead" --comm-hook bf16
off 5 "5 ranks do not divide its 12 shards" --batch-size 25
off 1 "on the first of the 2 devices only" --devices 2
off 1 "normalise each shard's samples apart in BatchNorm" --model 'flatten,linear(16),batchnorm,relu,linear(10)'
off 1 "with SyncBatchNorm its shards would go through copies of the model" --sync-batchnorm \
  --model 'flatten,linear(16),batchnorm,relu,linear(10)'
off 1 "shards would go one by one, which costs more" --model 'conv(4,3),relu,flatten,linear(10)'
if grep -q "(shards in one pass)" bf1x1.log; then
  off 1 "its products cost up to" --precision bf16
else
  off 1 "shards would go one by one in bf16" --precision bf16
fi
KDP_MAX_CPU_ISA=baseline off 1 "shards would go one by one in bf16 on a CPU without AVX2" --precision bf16
off 1 "(--no-reproducible)" --no-reproducible
"${plain[@]}" --reproducible --no-reproducible --max-steps 1 >both.log 2>&1 && fail "both flags were accepted"
grep -q "excludes" both.log || { cat both.log; fail "both flags: no clear message"; }
echo "ok: by default the mode is off (the same state at 1x1 as --no-reproducible's, with its cost said), and off for a comm hook, 5 ranks, 2 devices, BatchNorm, SyncBatchNorm, a convolution, bf16 and --no-reproducible"

run stopped 4 --threads 1 --max-steps 12
run stopped 3 --threads 1 --max-steps 30 --resume auto
grep -q "written by 4 rank(s)" stopped.log || { cat stopped.log; fail "the 3-rank run did not resume"; }
[[ $(state_digest stopped/ckpt-000000030.h5) == "$want" ]] ||
  fail "stopped at 4 ranks and resumed at 3: the state differs from the uninterrupted run's"
echo "ok: stopped at 4 ranks, resumed at 3: the uninterrupted run's state bit for bit"

# What it refuses, before training.
timeout 60 mpirun "${mpi_flags[@]}" -np 5 "${train[@]}" --batch-size 25 --max-steps 1 >five.log 2>&1 &&
  fail "5 ranks were accepted"
grep -q "which 5 ranks cannot share" five.log || { cat five.log; fail "5 ranks: no clear message"; }
"${train[@]}" --model 'flatten,linear(16),batchnorm,relu,linear(10)' --sync-batchnorm --max-steps 1 \
  --batch-size 11 >sbn11.log 2>&1 && fail "SyncBatchNorm with shards of no sample was accepted"
grep -q "with SyncBatchNorm layers, reproducible mode needs every batch to give each of its 12 shards a sample" \
  sbn11.log || { cat sbn11.log; fail "SyncBatchNorm with empty shards: no clear message"; }
"${train[@]}" --comm-hook bf16 --max-steps 1 >hook.log 2>&1 && fail "a comm hook was accepted"
grep -q "does not apply with --reproducible" hook.log || { cat hook.log; fail "hook: no clear message"; }
echo "ok: 5 ranks, SyncBatchNorm with empty shards and a comm hook refused with one line each"
