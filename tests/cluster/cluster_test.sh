#!/usr/bin/env bash
# kdp on an emulated cluster (scripts/cluster.sh): two "nodes" as network
# namespaces, Open MPI over TCP between them.
#
#   cluster_test.sh TOOLS_DIR TESTS_SOURCE_DIR REPO_ROOT CASE
#
#   ddp_bit_identical  a 2-node x 1-rank kdp-train run ends with weights
#                      bit-identical to the same run on 2 ranks of one node
#   link_down          a node losing its link mid-run ends every rank with a
#                      non-zero status within the collective timeout, the
#                      watchdog naming the rank and the node; the surviving
#                      node then resumes alone from the last step checkpoint
#                      (reproducible mode) and ends with the weights of a run
#                      that never lost a node
#   hierarchical       on 2 nodes x 2 ranks, the hierarchical hook sends 2/3
#                      of the plain ring's bytes over the network, and the
#                      bf16 one half of that
# Exit 77 (skipped) when this machine cannot make network namespaces.
set -uo pipefail
bin=$1 src=$2 repo=$3 case=$4
cluster=$repo/scripts/cluster.sh
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
name=kdpt$$
name=${name:0:8}
if ! why=$("$cluster" check --name "$name"); then
  echo "SKIP: $why"
  exit 77
fi
trap '"$cluster" down --name "$name" >/dev/null 2>&1; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
make_tiny_data
cd "$work" || fail "work directory"
train=("$bin/kdp-train" --data "$work/tiny.h5" --model 784,32,10 --batch-size 40 --threads 1
       --seed 5 --progress lines --log-every 5)

case $case in
ddp_bit_identical)
  "$cluster" up --name "$name" --nodes 2 --rate 1gbit >/dev/null || fail "cluster up"
  timeout 120 mpirun "${mpi_flags[@]}" -np 2 "${train[@]}" --epochs 3 --checkpoint-dir one_node \
    >one_node.log 2>&1 || { cat one_node.log; fail "the run on one node"; }
  timeout 120 "$cluster" run --name "$name" -- "${train[@]}" --epochs 3 --checkpoint-dir two_nodes \
    >two_nodes.log 2>&1 || { cat two_nodes.log; fail "the run on the emulated cluster"; }
  grep -q "2 rank(s)" two_nodes.log || fail "the cluster run did not have 2 ranks: $(head -3 two_nodes.log)"
  a=$(ls one_node/ckpt-*.h5 | tail -1) b=$(ls two_nodes/ckpt-*.h5 | tail -1)
  [[ -n $a && -n $b ]] || fail "no checkpoints ($a, $b)"
  [[ $(basename "$a") == "$(basename "$b")" ]] || fail "the runs ended at different steps: $a, $b"
  [[ $(model_digest "$a") == "$(model_digest "$b")" ]] ||
    fail "the weights differ between one node and the emulated cluster"
  echo "ok: 2 nodes x 1 rank over TCP gave the weights of 2 ranks on one node ($(basename "$a"))"
  ;;
link_down)
  "$cluster" up --name "$name" --nodes 2 --rate 1gbit >/dev/null || fail "cluster up"
  export KDP_COLLECTIVE_TIMEOUT=5
  start=$SECONDS
  timeout 90 "$cluster" run --name "$name" -- "${train[@]}" --epochs 400 --checkpoint-dir ckpt \
    --checkpoint-every 5 --reproducible >run.log 2>&1 &
  pid=$!
  # Training is under way on both nodes: then node 1 loses its link.
  for ((i = 0; i < 200; i++)); do grep -q "^epoch 1 step" run.log && break; sleep 0.1; done
  grep -q "^epoch 1 step" run.log || { cat run.log; fail "training did not start"; }
  cut_at=$SECONDS
  "$cluster" link 1 down --name "$name" >/dev/null || fail "link down"
  wait "$pid"
  status=$?
  ended=$((SECONDS - cut_at))
  tail -40 run.log
  ((status != 0)) || fail "the run exited 0 after a node lost its link"
  ((status != 124)) || fail "the run was still going 90 s later"
  grep -qE "watchdog: .* on rank [01] of 2 \(node ${name}[01]\)" run.log ||
    fail "no watchdog message naming the rank and the node: $(tail -3 run.log)"
  ((ended <= KDP_COLLECTIVE_TIMEOUT + 15)) || fail "the ranks ended $ended s after the cut (timeout $KDP_COLLECTIVE_TIMEOUT s)"
  # No rank is left on either node (Open MPI's daemon on the cut-off node may
  # linger: `down` removes it).
  sleep 4
  for node in 0 1; do
    left=$(ip netns pids "${name}$node" 2>/dev/null | xargs -r ps -o comm= -p 2>/dev/null | grep -c kdp-train)
    ((left == 0)) || fail "$left rank(s) left on node $node"
  done
  echo "ok: node 1 lost its link; every rank ended with status $status $ended s later (timeout ${KDP_COLLECTIVE_TIMEOUT} s)"
  # The survivor, node 0, goes on alone from the last step checkpoint (the
  # layout is an execution detail: 2 ranks' checkpoint, 1 rank now), as a
  # requeued job would, and trains 20 more steps.
  last=$(ls ckpt/ckpt-*.h5 | tail -1)
  [[ -n $last ]] || fail "no step checkpoint was written before the cut: $(ls ckpt)"
  step=$((10#$(basename "$last" .h5 | sed 's/^ckpt-//')))
  timeout 60 ip netns exec "${name}0" "${train[@]}" --epochs 400 --checkpoint-dir ckpt \
    --checkpoint-every 5 --reproducible --resume auto --max-steps $((step + 20)) >resumed.log 2>&1 ||
    { cat resumed.log; fail "the survivor did not resume"; }
  again=$((SECONDS - cut_at))
  grep -q "written by 2 rank(s) x 1 device(s), this run has 1 x 1; it goes on at sample" resumed.log ||
    { cat resumed.log; fail "the survivor's run did not resume the 2-rank checkpoint"; }
  grep -q "steps=$((step + 20)) ranks=1" resumed.log ||
    { tail -3 resumed.log; fail "the survivor did not reach step $((step + 20))"; }
  echo "ok: node 0 resumed alone from $(basename "$last") and trained to step $((step + 20)); $again s from the cut to the end of its 20 steps"
  # In reproducible mode the survivor's weights and optimizer state are those
  # of a run that never lost a node.
  end=$(printf 'ckpt-%09d.h5' $((step + 20)))
  timeout 60 "${train[@]}" --epochs 400 --checkpoint-dir never_lost --checkpoint-every 5 \
    --reproducible --max-steps $((step + 20)) >never_lost.log 2>&1 ||
    { cat never_lost.log; fail "the uninterrupted run"; }
  [[ $(state_digest "ckpt/$end") == "$(state_digest "never_lost/$end")" ]] ||
    fail "the survivor's state at step $((step + 20)) differs from an uninterrupted run's"
  echo "ok: at step $((step + 20)) the survivor's weights and optimizer state equal an uninterrupted run's bit for bit"
  ;;
hierarchical)
  # Per step and N gradient values (4 bytes each): the plain ring over 4 ranks
  # sends 2 (4 - 1) / 4 N from each rank, and ranks 1 and 3 send to the other
  # node: 3 N over the network. Hierarchical: a ring of the 2 leaders, N each:
  # 2 N; with bf16, N.
  "$cluster" up --name "$name" --nodes 2 >/dev/null || fail "cluster up"
  declare -A net
  declare -A route=([allreduce]=ring [hierarchical]=hierarchical [hierarchical-bf16]=hierarchical-bf16)
  for hook in allreduce hierarchical hierarchical-bf16; do
    timeout 120 "$cluster" run --name "$name" --ranks-per-node 2 -- "${train[@]}" --epochs 1 \
      --max-steps 6 --comm-hook "$hook" --trace "$work/$hook.json" >"$hook.log" 2>&1 ||
      { cat "$hook.log"; fail "the $hook run"; }
    # Across nodes float32 buckets take the ring unless the hook asks otherwise.
    grep -q "$hook bucket 0 via ${route[$hook]} (" "$work/$hook.json" ||
      fail "the trace of the $hook run does not name the route ${route[$hook]}: $(grep -o '"[^"]*bucket 0 via[^"]*"' "$work/$hook.json" | head -1)"
    net[$hook]=$(sed -n 's/^communication: \([0-9.]*\) MB over the network.*(2 node(s), hook .*/\1/p' "$hook.log")
    [[ -n ${net[$hook]} ]] || { cat "$hook.log"; fail "the $hook run did not say what it sent over 2 nodes"; }
  done
  ratio=$(awk -v a="${net[allreduce]}" -v h="${net[hierarchical]}" 'BEGIN {printf "%.3f", h / a}')
  half=$(awk -v h="${net[hierarchical]}" -v b="${net[hierarchical-bf16]}" 'BEGIN {printf "%.3f", b / h}')
  awk -v r="$ratio" 'BEGIN {exit !(r > 0.66 && r < 0.67)}' ||
    fail "hierarchical sent $ratio of the plain ring's network bytes, not 2/3 (${net[*]} MB)"
  awk -v r="$half" 'BEGIN {exit !(r > 0.499 && r < 0.501)}' ||
    fail "hierarchical-bf16 sent $half of hierarchical's network bytes, not 1/2"
  echo "ok: network bytes ${net[allreduce]} MB (ring), ${net[hierarchical]} MB (hierarchical, x$ratio), ${net[hierarchical-bf16]} MB (with bf16)"
  ;;
*) fail "unknown case $case" ;;
esac
