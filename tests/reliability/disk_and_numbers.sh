#!/usr/bin/env bash
# A full disk and diverging numbers: kdp-train ends with a clear message and a
# non-zero status, and the checkpoints already written are left intact.
#
#   disk_and_numbers.sh BIN_DIR TESTS_SOURCE_DIR
set -u
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
. "$src/reliability/common.sh"
make_tiny_data
args=(--data "$work/tiny.h5" --model 784,64,10 --batch-size 20 --threads 1 --progress lines)

# The disk fills during training: once checkpoints are being written, the
# process's file-size limit drops below a checkpoint's size.
(trap '' XFSZ; exec "$bin/kdp-train" "${args[@]}" --epochs 50 --checkpoint-every 2 \
  --checkpoint-dir "$work/ckpt" >"$work/full.log" 2>&1) &
pid=$!
for _ in $(seq 1 300); do ls "$work"/ckpt/ckpt-*.h5 >/dev/null 2>&1 && break; sleep 0.05; done
prlimit --pid "$pid" --fsize=65536 || fail "prlimit"
wait "$pid"
status=$?
out=$(cat "$work/full.log")
[[ $status -ne 0 ]] || fail "the run with a full disk ended with status 0"
grep -q "cannot write" <<<"$out" || fail "no message about the failed write: $(tail -3 <<<"$out")"
for c in "$work"/ckpt/*.h5; do
  model_digest "$c" >/dev/null || fail "$c is broken after the failed write"
done
all_finite "$work"/ckpt/*.h5 || fail "a checkpoint holds non-finite values"
ls -a "$work/ckpt" | grep -q "\.tmp\." && fail "a temporary file was left behind"
echo "ok: full disk: status $status, '$(grep -o 'cannot write[^:]*' <<<"$out" | head -1)', $(ls "$work"/ckpt/*.h5 | wc -l) earlier checkpoints intact"

# A checkpoint directory that cannot be created (a file is in its place).
touch "$work/file"
out=$("$bin/kdp-train" "${args[@]}" --epochs 1 --checkpoint-dir "$work/file/ckpt" 2>&1)
[[ $? -ne 0 ]] || fail "an impossible checkpoint directory was accepted"
grep -q "cannot create the checkpoint directory" <<<"$out" || fail "unclear message: $(tail -2 <<<"$out")"
echo "ok: impossible checkpoint directory refused"

# Diverging training: a huge learning rate makes the loss overflow.
out=$("$bin/kdp-train" "${args[@]}" --epochs 3 --optimizer sgd --lr 1e30 \
  --checkpoint-every 1 --checkpoint-dir "$work/nan" 2>&1)
status=$?
[[ $status -ne 0 ]] || fail "a diverging run ended with status 0"
grep -qE "NaN or Inf|the loss is (nan|inf|-nan)" <<<"$out" || fail "no NaN message: $(tail -3 <<<"$out")"
grep -qE "at step [0-9]+" <<<"$out" || fail "the message does not name the step"
ckpts=("$work"/nan/*.h5)
if [[ -e ${ckpts[0]} ]]; then all_finite "${ckpts[@]}" || fail "a poisoned checkpoint was written"; fi
echo "ok: divergence stopped: $(grep -oE '(the gradient of|the loss is)[^;]*' <<<"$out" | head -1)"
