#!/usr/bin/env bash
# kdp-train checkpointing every few steps is killed with SIGKILL at random
# moments; each time, a run with --resume auto finishes, and its final
# parameters equal an uninterrupted run's bit for bit.
#
#   kill_resume.sh BIN_DIR TESTS_SOURCE_DIR [TRIALS]
set -u
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
trials=${3:-10}
. "$src/reliability/common.sh"
make_tiny_data
args=(--data "$work/tiny.h5" --model 784,64,10 --epochs 3 --batch-size 20 --threads 1
      --checkpoint-every 3 --keep-last 2 --progress lines --log-every 1000000)

started=$(date +%s.%N)
"$bin/kdp-train" "${args[@]}" --checkpoint-dir "$work/reference" >"$work/reference.log" 2>&1 ||
  fail "the uninterrupted run failed: $(tail -3 "$work/reference.log")"
duration=$(/usr/bin/python3 -c "import time; print(time.time() - $started)")
want=$(model_digest "$(ls "$work"/reference/ckpt-*.h5 | tail -1)")
echo "uninterrupted run: ${duration:0:5} s, final model $want"
killed=0

for trial in $(seq 1 "$trials"); do
  seed=$((trial * 7919 + ${KDP_KILL_SEED:-0}))
  # Anywhere in the run: start-up, training, a checkpoint being written.
  delay=$(/usr/bin/python3 -c "import random; random.seed($seed); print(round(random.uniform(0.1, 0.95 * $duration), 3))")
  dir=$work/trial$trial
  # The run takes well under a second, so a machine busy with other tests can
  # shift it past the kill: a run that finished first is repeated in a fresh
  # directory with half the delay (up to 3 times).
  for attempt in 1 2 3 4; do
    rm -rf "$dir"
    "$bin/kdp-train" "${args[@]}" --checkpoint-dir "$dir" >"$dir.killed.log" 2>&1 &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    status=$?
    [[ $status -eq 0 && $attempt -lt 4 ]] || break
    delay=$(/usr/bin/python3 -c "print(round($delay / 2, 3))")
  done
  [[ $status -eq 137 ]] && killed=$((killed + 1))
  # Whatever moment it died at, no file under a checkpoint's name is broken.
  for c in "$dir"/ckpt-*.h5; do
    [[ -e $c ]] || continue
    model_digest "$c" >/dev/null || fail "trial $trial (seed $seed): $c does not load"
  done
  "$bin/kdp-train" "${args[@]}" --checkpoint-dir "$dir" --resume auto >"$dir.resumed.log" 2>&1 ||
    fail "trial $trial (seed $seed): the resumed run failed: $(tail -3 "$dir.resumed.log")"
  got=$(model_digest "$(ls "$dir"/ckpt-*.h5 | tail -1)")
  resumed=$(grep -o 'resumed from [^ ]*' "$dir.resumed.log" | head -1)
  echo "trial $trial: seed $seed, killed after ${delay}s (status $status), ${resumed:-started afresh}"
  [[ $got == "$want" ]] || fail "trial $trial (seed $seed): final model $got differs from $want"
done
((killed >= trials * 8 / 10)) || fail "only $killed of $trials runs were still going when killed"
echo "ok: $trials trials ($killed killed mid-run), every resume ended bit-identical to the uninterrupted run"
