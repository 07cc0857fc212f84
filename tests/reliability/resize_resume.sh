#!/usr/bin/env bash
# A run stopped at one layout resumes at another (ranks x devices) where it
# stopped, with no conversion: counted over both runs, every training sample
# is trained on exactly once per epoch (KDP_TEST_SAMPLE_LOG). The dataset has
# 602 samples, so the last batch of 24 holds 2: at 3 and 4 ranks some ranks
# have no share of it and take part with none.
#
#   4 -> 3 ranks   stopped mid-epoch by --max-steps
#   2 -> 1 rank    stopped by SIGTERM (its checkpoint written, exit 75)
#   1 -> 2 x 2     resumed from a step checkpoint (--checkpoint-every) after
#                  the run went on past it
#   2 -> 3 ranks   with --shard-optimizer (ZeRO-1): its checkpoint equals the
#                  replicated optimizer's bit for bit, weights and state, whether
#                  each rank writes its slice of the state (the default) or rank 0
#                  gathers it; ranks that cannot see rank 0's checkpoint
#                  directory make the run say so and gather instead
#
#   resize_resume.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
# shellcheck source=common.sh
source "$src/reliability/common.sh"
make_uneven_data
cd "$work" || fail "work directory"
train=("$bin/kdp-train" --data "$work/uneven.h5" --model 784,16,10 --batch-size 24 --threads 1
       --seed 3 --progress lines --log-every 1 --epochs 2)

# run NAME RANKS [kdp-train options...]: its samples go to NAME.samples.*
run() {
  local name=$1 ranks=$2
  shift 2
  local pass=(-x KDP_TEST_SAMPLE_LOG)
  [[ -n ${KDP_TEST_DELAY_RANK:-} ]] && pass+=(-x KDP_TEST_DELAY_RANK)
  KDP_TEST_SAMPLE_LOG=$work/$name.samples timeout 120 mpirun "${mpi_flags[@]}" "${pass[@]}" \
    -np "$ranks" "${train[@]}" "$@" >"$work/$name.log" 2>&1
}

# once PATTERN:LAST_STEP...: the samples of files matching each pattern, those
# of steps up to LAST_STEP (0: all), are every index once per epoch.
once() {
  /usr/bin/python3 - "$@" <<'PY'
import collections, glob, sys
seen = collections.defaultdict(collections.Counter)
for arg in sys.argv[1:]:
    pattern, last = arg.rsplit(":", 1)
    files = glob.glob(pattern)
    assert files, f"no sample log {pattern}"
    for path in files:
        for line in open(path):
            epoch, step, index = map(int, line.split())
            if int(last) == 0 or step <= int(last):
                seen[epoch][index] += 1
assert sorted(seen) == [0, 1], f"epochs {sorted(seen)}"
for epoch, counts in sorted(seen.items()):
    missing = sorted(set(range(602)) - set(counts))
    twice = sorted(i for i, c in counts.items() if c > 1)
    assert not missing and not twice and len(counts) == 602, \
        f"epoch {epoch}: {len(missing)} samples missing {missing[:5]}, {len(twice)} seen twice {twice[:5]}"
print(f"every one of 602 samples once in each of {len(seen)} epochs")
PY
}

# 4 -> 3, mid-epoch.
run a4 4 --checkpoint-dir d1 --max-steps 10 || { cat a4.log; fail "the 4-rank run"; }
run b3 3 --checkpoint-dir d1 --resume auto || { cat b3.log; fail "the 3-rank resume"; }
grep -q "written by 4 rank(s) x 1 device(s), this run has 3 x 1; it goes on at sample 240 of epoch 1" b3.log ||
  { cat b3.log; fail "4 -> 3: the resume did not say where it goes on"; }
ok=$(once "$work/a4.samples.*:0" "$work/b3.samples.*:0") || fail "4 -> 3: $ok"
echo "ok: 4 -> 3 ranks mid-epoch: $ok"

# 2 -> 1, SIGTERM. Rank 0 sleeps in each forward so that the signal comes
# mid-run, once the sample logs (written as they train) show 6 steps.
KDP_TEST_DELAY_RANK=0:0.1 run a2 2 --checkpoint-dir d2 &
pid=$!
for _ in $(seq 1 400); do
  (($(cat a2.samples.* 2>/dev/null | wc -l) >= 6 * 24)) && break
  sleep 0.05
done
# The ranks themselves (mpirun would end them on its own SIGTERM).
launcher=$(pgrep -f "^mpirun .*--checkpoint-dir d2" | head -1)
[[ -n $launcher ]] || fail "2 -> 1: no mpirun to find the ranks by"
pkill -TERM -P "$launcher"
wait "$pid"
grep -q "exit 75" a2.log || { grep -v "^epoch" a2.log | tail -20; fail "2 -> 1: the ranks did not stop with a checkpoint (exit 75)"; }
run b1 1 --checkpoint-dir d2 --resume auto || { cat b1.log; fail "the 1-rank resume"; }
ok=$(once "$work/a2.samples.*:0" "$work/b1.samples.*:0") || fail "2 -> 1: $ok"
echo "ok: 2 -> 1 rank after SIGTERM: $ok"

# 1 -> 2 x 2 devices, from the step checkpoint at step 8 (the run went on to 10).
run a1 1 --checkpoint-dir d3 --checkpoint-every 4 --max-steps 10 || { cat a1.log; fail "the 1-rank run"; }
ls d3/ckpt-000000008.h5 >/dev/null || fail "1 -> 2x2: no checkpoint at step 8: $(ls d3)"
rm -f d3/ckpt-000000010.h5
run b22 2 --checkpoint-dir d3 --resume auto --devices 2 || { cat b22.log; fail "the 2 x 2 resume"; }
grep -q "resumed from .*ckpt-000000008.h5" b22.log || { cat b22.log; fail "1 -> 2x2: not resumed from step 8"; }
ok=$(once "$work/a1.samples.*:8" "$work/b22.samples.*:0") || fail "1 -> 2x2: $ok"
echo "ok: 1 -> 2 ranks x 2 devices from a step checkpoint: $ok"

# 2 -> 3 with the optimizer sharded: the same checkpoint as without sharding.
run p2 2 --checkpoint-dir d4p --max-steps 8 || { cat p2.log; fail "the replicated run"; }
run z2 2 --checkpoint-dir d4z --max-steps 8 --shard-optimizer || { cat z2.log; fail "the sharded run"; }
[[ $(state_digest d4p/ckpt-000000008.h5) == $(state_digest d4z/ckpt-000000008.h5) ]] ||
  fail "2 ranks: the sharded optimizer's checkpoint differs from the replicated one's"
grep -q "rank 0 gathers" z2.log && { cat z2.log; fail "the sharded run gathered instead of writing slices"; }
run g2 2 --checkpoint-dir d4g --max-steps 8 --shard-optimizer --checkpoint-writes gather ||
  { cat g2.log; fail "the sharded run gathering its checkpoints"; }
[[ $(state_digest d4p/ckpt-000000008.h5) == $(state_digest d4g/ckpt-000000008.h5) ]] ||
  fail "2 ranks: the gathered checkpoint differs from the replicated one's"
# Each rank its own working directory: a relative --checkpoint-dir is then not
# one directory for both (as a node-local path on two nodes).
mkdir -p wd0 wd1
timeout 120 mpirun "${mpi_flags[@]}" -np 1 --wdir "$work/wd0" "${train[@]}" --checkpoint-dir d \
  --max-steps 8 --shard-optimizer : -np 1 --wdir "$work/wd1" "${train[@]}" --checkpoint-dir d \
  --max-steps 8 --shard-optimizer >split.log 2>&1 || { cat split.log; fail "the split-directory run"; }
grep -q "rank 1 cannot open .* one file system.*rank 0 gathers" split.log ||
  { cat split.log; fail "the split-directory run did not say why it gathers"; }
[[ $(state_digest d4p/ckpt-000000008.h5) == $(state_digest wd0/d/ckpt-000000008.h5) ]] ||
  fail "the split-directory run's checkpoint differs from the replicated one's"
run z3 3 --checkpoint-dir d4z --resume auto --shard-optimizer || { cat z3.log; fail "the sharded 3-rank resume"; }
ok=$(once "$work/z2.samples.*:0" "$work/z3.samples.*:0") || fail "sharded 2 -> 3: $ok"
echo "ok: --shard-optimizer: the checkpoint of the replicated optimizer bit for bit; 2 -> 3 ranks: $ok"
