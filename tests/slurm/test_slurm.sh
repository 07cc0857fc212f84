#!/usr/bin/env bash
# A real single-node Slurm on localhost runs examples/slurm/train.sbatch; a
# signal arrives mid-run; the job must checkpoint, requeue itself, resume, and
# finish with exactly the accuracy of an uninterrupted run. Three times:
# launched by srun and warned with SIGUSR1 (the time limit's signal); launched
# by mpirun and SIGTERM sent to the batch shell (which mpirun does not pass on
# as such); and SIGTERM sent to mpirun itself, which ends the ranks and exits 1
# whatever they said: the script must requeue on rank 0's status file.
#
#   test_slurm.sh BUILD_EXAMPLES_DIR REPO_ROOT
set -u
bin=$(cd "$1" && pwd)
repo=$(cd "$2" && pwd)
if [[ $(id -u) -ne 0 ]]; then
  echo "skipped: the local Slurm runs its daemons as root"
  exit 77
fi
work=$(mktemp -d /tmp/kdp-slurm-test.XXXXXX)
export SLURM_LOCAL_DIR=$work/slurm
export SLURM_LOCAL_PORT=$((7000 + RANDOM % 2000))
cleanup() {
  "$repo/scripts/slurm-local.sh" stop >/dev/null 2>&1
  [[ -n ${KDP_KEEP_WORK:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [[ -n ${job:-} ]] && scontrol show job "$job" 2>/dev/null | head -20
  ls "$work" 2>/dev/null
  cat "$work"/kdp-train-*.out 2>/dev/null | grep -v "^epoch .* step" | tail -30
  echo "--- slurmctld and slurmd logs"
  tail -15 "$SLURM_LOCAL_DIR"/log/slurmctld.log "$SLURM_LOCAL_DIR"/log/slurmd.log 2>/dev/null
  exit 1
}
wait_until() {  # wait_until SECONDS COMMAND...
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS > deadline)) && return 1
    sleep 0.25
  done
}
job_field() { scontrol show job "$job" -o 2>/dev/null | grep -o "$1=[^ ]*" | cut -d= -f2; }

"$bin/kdp-data" import-fashion-mnist --out "$work/fm.h5" >/dev/null || fail "import"
# Four epochs (about 5 s at two ranks): the signal must reach the ranks before
# the run ends, and through mpirun it took more than the 2 s two epochs left.
args=(--data "$work/fm.h5" --epochs 4 --threads 1 --batch-size 128 --seed 3)

# The uninterrupted reference, same ranks and threads.
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
reference=$(mpirun "${mpi_flags[@]}" -np 2 "$bin/kdp-train" "${args[@]}" --progress lines 2>&1 |
  grep -o 'test_accuracy=[0-9.]* test_loss=[0-9.]*') || fail "reference run"
echo "uninterrupted: $reference"

"$repo/scripts/slurm-local.sh" start || fail "starting Slurm"
export SLURM_CONF=$SLURM_LOCAL_DIR/slurm.conf
cd "$work"

interrupted_run() {  # LAUNCHER SIGNAL TARGET (batch: the batch shell; launcher: mpirun)
  local launcher=$1 signal=$2 target=$3 run=$work/run-$1-$3
  # (mpirun signals the ranks one KDP_MPIRUN_KILL_WAIT after its own SIGTERM:
  # a second, while this short run still trains.)
  job=$(KDP_TRAIN="$bin/kdp-train" KDP_RUN_DIR="$run" KDP_LAUNCHER=$launcher \
    KDP_MPIRUN_FLAGS="${mpi_flags[*]}" KDP_MPIRUN_KILL_WAIT=1 \
    sbatch --parsable --export=ALL "$repo/examples/slurm/train.sbatch" "${args[@]}" \
    --checkpoint-every 100) || fail "sbatch"
  echo "submitted job $job ($launcher)"

  # Once the first checkpoint exists (step 100 of 1876), send the signal.
  wait_until 120 bash -c "ls '$run'/checkpoints/ckpt-*.h5 >/dev/null 2>&1" ||
    fail "no checkpoint appeared"
  if [[ $target == batch ]]; then
    scancel -b -s "$signal" "$job" || fail "scancel"
    echo "sent SIG$signal to job $job"
  else
    pkill -"$signal" -f "^mpirun .*--checkpoint-dir $run/checkpoints" || fail "no mpirun to signal"
    echo "sent SIG$signal to the mpirun of job $job"
  fi

  # Requeued jobs wait two minutes before they are eligible; start it now.
  # (The node must be idle again first: the old run's steps are still ending.)
  wait_until 120 bash -c "scontrol show job $job -o | grep -q 'JobState=PENDING.*Restarts=1'" ||
    fail "the job was not requeued"
  wait_until 60 bash -c "[[ \$(sinfo -h -n localhost -o %T) == idle ]]" || fail "the node stayed busy"
  # The old run's step daemons clean up its spool directory when they end; the
  # requeued run (same job id) must not start before they have.
  wait_until 60 bash -c "! pgrep -f 'slurmstepd: \[$job\.' >/dev/null" || fail "old job steps linger"
  sleep 1
  scontrol update JobId="$job" StartTime=now
  wait_until 180 bash -c "scontrol show job $job -o | grep -qE 'JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT)'" ||
    fail "the requeued job did not finish"
  [[ $(job_field JobState) == COMPLETED ]] || fail "job state $(job_field JobState)"

  out=$work/kdp-train-$job.out
  [[ -f $out ]] || fail "no output file (a job that never ran)"
  if [[ $target == batch ]]; then
    grep -qE "kdp-train: stopped by signal (10|15) .*exit 75" "$out" ||
      fail "kdp-train did not stop on the signal"
  else  # mpirun, signalled, relays no more of the ranks' output: their status file speaks
    grep -q "launcher status 1, rank 0 status 75); requeueing" "$out" ||
      fail "the script did not requeue on rank 0's status while mpirun said 1"
  fi
  grep -q "requeueing" "$out" || fail "the script did not requeue"
  grep -q "resumed from" "$out" || fail "the second run did not resume"
  result=$(grep -o 'test_accuracy=[0-9.]* test_loss=[0-9.]*' "$out" | tail -1)
  echo "interrupted and resumed ($launcher, SIG$signal to the $target): $result"
  grep "requeueing" "$out" | sed 's/^/    | /'
  [[ "$result" == "$reference" ]] || fail "the resumed run ended with '$result', not '$reference'"
  echo "ok: $launcher, SIG$signal to the $target: checkpointed, requeued, resumed, finished with the uninterrupted run's accuracy"
}

interrupted_run srun USR1 batch
interrupted_run mpirun TERM batch
interrupted_run mpirun TERM launcher
