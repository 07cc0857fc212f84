#!/usr/bin/env bash
# A single-node Slurm on localhost for tests: munge, slurmctld and slurmd with
# everything under $SLURM_LOCAL_DIR (default /tmp/kdp-slurm), nothing in /etc.
#
#   scripts/slurm-local.sh start   # writes $SLURM_LOCAL_DIR/slurm.conf, starts the daemons
#   scripts/slurm-local.sh stop    # cancels jobs, stops every daemon it started
#   scripts/slurm-local.sh env     # prints: export SLURM_CONF=...
#
# Clients need SLURM_CONF=$SLURM_LOCAL_DIR/slurm.conf. Runs as root (SlurmUser=root).
set -euo pipefail
dir=${SLURM_LOCAL_DIR:-/tmp/kdp-slurm}
conf=$dir/slurm.conf

wait_for() {  # wait_for SECONDS COMMAND...: polls every 0.1 s
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then return 1; fi
    sleep 0.1
  done
}

node_line() {
  # The hardware as slurmd sees it, for node "localhost".
  slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]*/NodeName=localhost NodeAddr=127.0.0.1/' -e 's/$/ State=UNKNOWN/'
}

start() {
  stop_quietly
  rm -rf "$dir"
  mkdir -p "$dir"/{munge,state,spool,log}
  chmod 700 "$dir/munge"
  dd if=/dev/urandom bs=1024 count=1 of="$dir/munge/munge.key" status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
  cat >"$conf" <<CONF
ClusterName=kdp-local
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
SlurmctldPort=${SLURM_LOCAL_PORT:-6817}
SlurmdPort=$(( ${SLURM_LOCAL_PORT:-6817} + 1 ))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
$(node_line)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$conf
  slurmctld -i
  slurmd -N localhost
  if ! wait_for 30 bash -c "sinfo -h -n localhost -o %T | grep -qx idle"; then
    echo "slurm-local: the node did not become idle; logs in $dir/log" >&2
    exit 1
  fi
  echo "slurm-local: running; export SLURM_CONF=$conf"
}

stop_quietly() {
  [[ -f $conf ]] || return 0
  export SLURM_CONF=$conf
  scancel --full --partition=debug >/dev/null 2>&1 || true
  wait_for 15 bash -c '[[ -z "$(squeue -h 2>/dev/null)" ]]' || true
  scontrol shutdown >/dev/null 2>&1 || true
  for pidfile in "$dir/slurmctld.pid" "$dir/slurmd.pid"; do
    if [[ -f $pidfile ]]; then
      local pid
      pid=$(cat "$pidfile")
      wait_for 10 bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
    fi
  done
  # Orphaned job steps ignore SIGTERM (see docs): end them.
  pkill -9 -f "slurmstepd.*" 2>/dev/null || true
  if [[ -f $dir/munge/munged.pid ]]; then
    kill "$(cat "$dir/munge/munged.pid")" 2>/dev/null || true
  fi
}

case ${1:-} in
  start) start ;;
  stop) stop_quietly; echo "slurm-local: stopped" ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
