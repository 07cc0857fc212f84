#!/usr/bin/env bash
# examples/06_surrogate.cpp end to end at a small size: the heat equation
# solved into 2 HDF5 files, a CNN trained on them as one dataset on 2 ranks,
# then evaluated on new samples against the solver. The map from (k, q) to u
# is local (a diffusion length of about 2 cells at G = 16, inside the 9 x 9
# view of the 4 convolutions), so a trained surrogate must explain most of
# the variance of new samples: R² above 0.5 (predicting the mean gives 0).
#
#   surrogate_example.sh EXAMPLE TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
example=$1 bin=$2 src=$3
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
cd "$work" || fail "work directory"
"$example" generate heat 2 96 16 1 >generate.log 2>&1 || { cat generate.log; fail "generate"; }
grep -q "heat/heat-001.h5: 96 samples of 16x16" generate.log || { cat generate.log; fail "2 files"; }
"$example" generate heat 1 8 16 1 >again.log 2>&1 && fail "an existing file was written over"
grep -q "may exist already" again.log || { cat again.log; fail "no clear message for an existing file"; }
timeout 200 mpirun "${mpi_flags[@]}" -np 2 "$bin/kdp-train" --data 'heat/heat-*.h5' --inputs /fields \
  --targets /temperature --model 'conv(8,3,1,1),relu,conv(8,3,1,1),relu,conv(8,3,1,1),relu,conv(1,3,1,1)' \
  --epochs 12 --batch-size 16 --lr 3e-3 --monitor val_r2 --checkpoint-dir ck --progress lines \
  --log-every 1000 >train.log 2>&1 || { cat train.log; fail "training the surrogate"; }
"$example" evaluate ck/best.h5 64 16 >evaluate.log 2>&1 || { cat evaluate.log; fail "evaluate"; }
cat evaluate.log
r2=$(sed -n 's/.*, R2 \([-0-9.]*\);.*/\1/p' evaluate.log)
awk -v r="$r2" 'BEGIN {exit !(r > 0.5)}' || fail "the surrogate's R² on new samples is $r2, not above 0.5"
grep -q "speed-up" evaluate.log || fail "no speed-up reported"
echo "ok: the surrogate explains R² $r2 of new samples' variance"
