#!/usr/bin/env bash
# kdp-train --trace on 2 ranks, rank 1 slowed by KDP_TEST_DELAY_RANK: the
# Chrome trace holds every rank's phases (data wait, forward, backward, each
# bucket's ready time and reduction with --no-reproducible, the exact sum in
# reproducible mode, optimizer), rank 1's forward passes are the delay longer,
# and rank 0 names rank 1 as the straggler, in both modes. An existing trace
# file is refused without --overwrite.
#
#   trace.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
# shellcheck source=common.sh
source "$src/reliability/common.sh"
make_tiny_data
cd "$work" || fail "work directory"
train=("$bin/kdp-train" --data "$work/tiny.h5" --model 784,32,10 --batch-size 40 --threads 1
       --seed 5 --progress lines --epochs 1 --max-steps 8)

for mode in --no-reproducible --reproducible; do
KDP_TEST_DELAY_RANK=1:0.03 timeout 120 mpirun "${mpi_flags[@]}" -x KDP_TEST_DELAY_RANK -np 2 \
  "${train[@]}" "$mode" --trace run.json --overwrite >run.log 2>&1 ||
  { cat run.log; fail "the traced run ($mode)"; }
grep -E "^trace: run.json \(2 rank\(s\)\); slowest rank 1 \(node [^)]+\): .* - a straggler$" run.log ||
  { cat run.log; fail "rank 0 did not name rank 1 as the straggler ($mode)"; }
/usr/bin/python3 - run.json "$mode" <<'PY' || fail "the trace ($mode)"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
by = lambda rank, name: [e for e in spans if e["pid"] == rank and e["name"].startswith(name)]
exchange = (("kdp::ddp::reduction wait", "allreduce bucket") if sys.argv[2] == "--no-reproducible"
            else ("kdp::train::exact_sum", "kdp::train::exact_sum allgather rows"))
for rank in (0, 1):
    for name in ("kdp::data::wait", "kdp::train::forward", "kdp::train::backward",
                 "kdp::train::optimizer") + exchange:
        assert by(rank, name), f"rank {rank} has no '{name}' span"
    if sys.argv[2] == "--no-reproducible":
        ready = [e for e in events if e.get("ph") == "i" and e["pid"] == rank and "ready" in e["name"]]
        assert ready, f"rank {rank} has no bucket-ready instants"
        assert all(e["tid"] == 1 for e in by(rank, "allreduce")), "reductions go on the comm track"
    steps = sorted({e["args"]["step"] for e in by(rank, "kdp::train::optimizer")})
    assert steps == list(range(1, 9)), f"rank {rank}'s optimizer steps: {steps}"
f0 = min(e["dur"] for e in by(0, "kdp::train::forward"))
f1 = min(e["dur"] for e in by(1, "kdp::train::forward"))
# Rank 1 sleeps 30 ms in every forward.
assert f1 >= 30000 and f1 - f0 >= 25000, f"forward: rank 0 {f0} us, rank 1 {f1} us"
# Rank 0 waits for rank 1 inside its reductions: its allreduce spans end
# after rank 1's forward.
print(f"ok ({sys.argv[2]}): forward min rank 0 {f0:.0f} us, rank 1 {f1:.0f} us; {len(events)} events")
PY
done
# The trace is output that someone may be reading: not replaced silently.
timeout 60 "${train[@]}" --trace run.json >again.log 2>&1
status=$?
((status == 1)) || { cat again.log; fail "an existing trace file: exit $status, not 1"; }
grep -q "the trace file 'run.json' exists" again.log || { cat again.log; fail "no reason given"; }
timeout 60 "${train[@]}" --trace run.json --overwrite >again.log 2>&1 || { cat again.log; fail "--overwrite"; }
grep -q "^trace: run.json (1 rank(s))" again.log || { cat again.log; fail "the replaced trace"; }
# A directory where the file belongs is refused before training, --overwrite or not.
mkdir -p tracedir
timeout 60 "${train[@]}" --trace tracedir --overwrite >dir.log 2>&1
status=$?
((status == 1)) || { cat dir.log; fail "a directory as the trace file: exit $status, not 1"; }
grep -q "cannot write the trace file 'tracedir': it is a directory" dir.log || { cat dir.log; fail "no reason given"; }
grep -q "^epoch" dir.log && fail "it trained before refusing the trace file"
# A requeued run (--resume auto) keeps the first part's trace and writes its
# own beside it, named by the step it resumed at.
timeout 60 "${train[@]}" --max-steps 4 --checkpoint-dir ck --checkpoint-every 4 --trace part.json \
  >part1.log 2>&1 || { cat part1.log; fail "the first part"; }
before=$(md5sum <part.json)
timeout 60 "${train[@]}" --max-steps 8 --checkpoint-dir ck --resume auto --trace part.json \
  >part2.log 2>&1 || { cat part2.log; fail "the resumed part"; }
[[ $(md5sum <part.json) == "$before" ]] || fail "the resumed run changed the first part's trace"
grep -q "^trace: part.step4.json (1 rank(s))" part2.log || { cat part2.log; fail "the resumed part's trace"; }
/usr/bin/python3 -c "import json,sys; json.load(open('part.step4.json'))" || fail "part.step4.json is not JSON"
echo "ok: the trace names the straggler and keeps an existing file"
