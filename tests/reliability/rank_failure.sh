#!/usr/bin/env bash
# One rank of a distributed kdp-train dies (SIGKILL) mid-training: every other
# rank must end, non-zero, within 30 s, with a message; nothing may hang.
#
#   rank_failure.sh BIN_DIR TESTS_SOURCE_DIR RANKS
set -u
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
ranks=${3:-2}
. "$src/reliability/common.sh"
make_tiny_data
export KDP_COLLECTIVE_TIMEOUT=20  # the watchdog, in case MPI itself does not notice

mpirun "${mpi_flags[@]}" -np "$ranks" "$bin/kdp-train" --data "$work/tiny.h5" --model 784,64,10 \
  --epochs 1000 --batch-size 60 --threads 1 --progress lines --log-every 5 >"$work/run.log" 2>&1 &
launcher=$!
# Wait until training is under way, then kill the last rank.
for _ in $(seq 1 200); do grep -q "step" "$work/run.log" 2>/dev/null && break; sleep 0.1; done
victim=$(pgrep -f "kdp-train --data $work/tiny.h5" | tail -1)
[[ -n $victim ]] || fail "no rank to kill"
kill -9 "$victim"
start=$SECONDS
while kill -0 "$launcher" 2>/dev/null; do
  if ((SECONDS - start > 30)); then
    pkill -9 -f "kdp-train --data $work/tiny.h5"
    kill -9 "$launcher" 2>/dev/null
    fail "the other ranks were still running 30 s after rank $victim died"
  fi
  sleep 0.2
done
wait "$launcher"
status=$?
elapsed=$((SECONDS - start))
left=$(pgrep -f "kdp-train --data $work/tiny.h5" | wc -l)
[[ $left -eq 0 ]] || fail "$left rank(s) still alive after the launcher ended"
[[ $status -ne 0 ]] || fail "the job ended with status 0 after losing a rank"
grep -qiE "signal 9|killed|watchdog|aborted" "$work/run.log" ||
  fail "no message says what happened: $(tail -5 "$work/run.log")"
echo "ok: $ranks ranks, one killed; the job ended with status $status after ${elapsed} s with:"
grep -iE "signal 9|killed|watchdog|aborted" "$work/run.log" | head -3
