#!/usr/bin/env bash
# Nothing a user already has is lost: kdp-train and kdp-data used as a hostile
# (or hurried) user would, each case checking that what was written before is
# left byte for byte, that bad input ends with exit 1 and one readable line,
# and that nothing blocks or crashes.
#
#   user_data.sh BIN_DIR TESTS_SOURCE_DIR CASE [NO_FLOCK_LIBRARY]
#
# Cases that need a private mount (a full or read-only file system) run under
# `unshare -m`, so that the mount vanishes with the test; where that is not
# allowed they skip (exit 77) and say why.
set -u
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
case=$3
no_flock=${4:-}
. "$src/reliability/common.sh"
make_tiny_data
train=("$bin/kdp-train" --data "$work/tiny.h5" --model 784,16,10 --batch-size 40 --threads 1
       --progress lines --log-every 1)

# Every file under a directory with its checksum (lock files aside: they exist
# only while a run holds the directory).
snapshot() { (cd "$1" && find . -type f ! -name .kdp-run.lock -print0 | sort -z | xargs -0 -r sha256sum); }

expect() {  # NAME STATUS TEXT COMMAND...: the exit status, TEXT in one line of output
  local name=$1 want=$2 text=$3
  shift 3
  local out status
  out=$(timeout 60 "$@" 2>&1)
  status=$?
  [[ $status -eq $want ]] || fail "$name: exit status $status, wanted $want: $(tail -5 <<<"$out")"
  grep -qF -- "$text" <<<"$out" || fail "$name: the output lacks '$text': $out"
  echo "ok: $name: $(grep -F -- "$text" <<<"$out" | head -1)"
}

one_line() {  # NAME COMMAND...: exit 1 and one line of output (and the --help hint)
  local name=$1
  shift
  local out status
  out=$(timeout 60 "$@" 2>&1)
  status=$?
  out=$(grep -v "^Run with --help for more information.$\|^kdp-train: [0-9] rank(s)\|^kdp-train: reproducible mode\|^kdp-train: the BLAS (OpenBLAS)" <<<"$out")
  [[ $status -eq 1 ]] || fail "$name: exit status $status, wanted 1: $out"
  [[ $(grep -c . <<<"$out") -eq 1 ]] || fail "$name: not one line:
$out"
  grep -qE "HDF5-DIAG|json.exception|filesystem error|terminate called" <<<"$out" &&
    fail "$name: a raw library message: $out"
  echo "ok: $name: $out"
}

unchanged() {  # NAME BEFORE DIR
  [[ $(snapshot "$3") == "$2" ]] || fail "$1: the files changed"
}

# Runs "$@" in a private mount namespace (unshare -m), or skips the case.
private_mounts() {
  unshare -m true 2>/dev/null || { echo "skipped: unshare -m is not allowed here"; exit 77; }
  unshare -m --propagation private bash -c "$@"
}

py() { /usr/bin/python3 - "$@"; }

case $case in
concurrent_runs)
  # Two runs started together in one checkpoint directory, with one metrics
  # file: one runs, the other is refused at once naming it; the winner's
  # checkpoints and metrics are its own.
  for lr in 0.001 0.002; do
    "${train[@]}" --epochs 200 --lr $lr --checkpoint-dir "$work/run" --metrics "$work/m.csv" \
      >"$work/lr$lr.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}"
  a=$?
  wait "${pids[1]}"
  b=$?
  [[ $((a + b)) -eq 1 ]] || fail "exit statuses $a and $b, wanted one 0 and one 1:
$(tail -3 "$work"/lr*.log)"
  winner=0.001 loser=0.002
  [[ $a -eq 1 ]] && winner=0.002 loser=0.001
  grep -q "the checkpoint directory '$work/run' is in use by another run (pid [0-9]* on host .*, started 20" \
    "$work/lr$loser.log" || fail "the refusal does not name the run: $(cat "$work/lr$loser.log")"
  recorded=$(py "$work/run/best.h5" <<<'import h5py,sys; print(h5py.File(sys.argv[1])["run"].attrs["lr"])')
  [[ $recorded == "$winner" ]] || fail "best.h5 records lr $recorded, not the winner's $winner"
  py "$work/m.csv" <<'PY' || fail "the metrics file is garbled"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
assert rows[0][:3] == ["type", "epoch", "step"], rows[0]
steps = [int(r[2]) for r in rows[1:] if r[0] == "step"]
assert all(len(r) == len(rows[0]) and r[0] in ("step", "epoch") for r in rows[1:])
assert steps == list(range(1, len(steps) + 1)), "steps missing or twice"
PY
  echo "ok: two runs started together: the lr $winner run ran, the lr $loser run was refused:"
  sed 's/^/    | /' "$work/lr$loser.log"

  # A run killed with SIGKILL leaves the directory free: the kernel released
  # its lock. The next run that owns it removes the temporaries of saves that
  # crashed (here one of a process that has ended) and says what it freed.
  "${train[@]}" --epochs 100000 --checkpoint-dir "$work/killed" --metrics "$work/k.csv" \
    >"$work/killed.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do ls "$work"/killed/ckpt-*.h5 >/dev/null 2>&1 && break; sleep 0.05; done
  expect "a second run while the first runs" 1 "is in use by another run (pid $pid on host" \
    "${train[@]}" --epochs 1 --checkpoint-dir "$work/killed" --resume auto --metrics "$work/k2.csv"
  expect "a second run writing the first one's metrics" 1 "the metrics file '$work/k.csv' is in use by another run (pid $pid" \
    "${train[@]}" --epochs 1 --checkpoint-dir "$work/other" --metrics "$work/k.csv"
  kill -9 "$pid"
  wait "$pid" 2>/dev/null
  dead=$(sh -c 'echo $$')
  head -c 1000000 /dev/zero >"$work/killed/.ckpt-000000999.h5.tmp.$dead.0"
  # (The SIGKILL may have come during a save of its own: one more file then.)
  expect "the directory of a killed run" 0 "temporary file(s) of saves interrupted by a crash in '$work/killed' (1." \
    "${train[@]}" --epochs 1 --checkpoint-dir "$work/killed" --resume auto --metrics "$work/k.csv"
  if ls -a "$work/killed" | grep -q "\.tmp\."; then fail "an orphaned temporary file is still there"; fi
  ;;

no_locks)
  # A file system without working locks (flock() answers ENOSYS, as Lustre
  # mounted without -o flock does; simulated by a preloaded flock()).
  [[ -f $no_flock ]] || { echo "skipped: no flock-failing library was built"; exit 77; }
  mkdir -p "$work/run"
  before=$(snapshot "$work/run")
  expect "no locks" 1 "cannot lock the checkpoint directory '$work/run': its file system has no working locks (flock(): function not implemented)" \
    env LD_PRELOAD="$no_flock" "${train[@]}" --epochs 1 --checkpoint-dir "$work/run"
  unchanged "no locks" "$before" "$work/run"
  expect "no locks, told so" 0 "test_accuracy=" \
    env LD_PRELOAD="$no_flock" "${train[@]}" --epochs 1 --checkpoint-dir "$work/run" --without-locks
  ;;

metrics_rows)
  # The Slurm script always passes --resume auto: into a new directory, with a
  # metrics file that holds rows, that is a fresh start, refused as one.
  "${train[@]}" --epochs 2 --checkpoint-dir "$work/first" --metrics "$work/m.csv" >/dev/null 2>&1 ||
    fail "the first run failed"
  before=$(sha256sum <"$work/m.csv")
  expect "--resume auto with nothing to resume over a metrics file" 1 "already holds rows of another run" \
    "${train[@]}" --epochs 2 --checkpoint-dir "$work/new" --resume auto --metrics "$work/m.csv"
  [[ $(sha256sum <"$work/m.csv") == "$before" ]] || fail "the metrics file changed"
  # A resume keeps the rows up to its step: the run continues from step 30's
  # checkpoint although the file holds rows of a later crash.
  "${train[@]}" --epochs 3 --checkpoint-dir "$work/first" --resume auto --metrics "$work/m.csv" \
    >/dev/null 2>&1 || fail "the resume failed"
  py "$work/m.csv" <<'PY' || fail "the rows after the resume are wrong"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
steps = [int(r[2]) for r in rows[1:] if r[0] == "step"]
assert steps == list(range(1, 46)), steps
PY
  echo "ok: --resume auto kept rows 1-30 and added 31-45"
  # A path that is not a metrics file is never appended to.
  for bad in "$work/tiny.h5" "$work/first/run.json"; do
    before=$(sha256sum <"$bad")
    expect "metrics into $(basename "$bad")" 1 ", not a kdp metrics file" \
      "${train[@]}" --epochs 1 --checkpoint-dir "$work/first" --resume auto --metrics "$bad"
    [[ $(sha256sum <"$bad") == "$before" ]] || fail "$bad changed"
  done
  ;;

full_disk)
  # A real full file system (a 256 kB tmpfs) under the metrics file: the run
  # stops, one line says why, and the checkpoint of the step is written
  # elsewhere. kdp-data on a full disk says so in one line, and a read-only
  # checkpoint directory is named as such.
  cp "$work/tiny.h5" "$work/data.h5"
  cat >"$work/inside.sh" <<EOF
set -u
mkdir -p "$work/small" "$work/ro"
mount -t tmpfs -o size=256k tmpfs "$work/small" || exit 77
head -c 250000 /dev/zero >"$work/small/filler" 2>/dev/null
${train[*]} --epochs 30 --checkpoint-dir "$work/ckpt" --metrics "$work/small/m.csv" >"$work/full.log" 2>&1
echo \$? >"$work/full.status"
"$bin/kdp-data" import-idx --images "$work/idx/train-images.idx.gz" --labels "$work/idx/train-labels.idx.gz" \
  --out "$work/small/data.h5" --split train >"$work/data.log" 2>&1
echo \$? >"$work/data.status"
mount --bind "$work/ro" "$work/ro" && mount -o remount,ro,bind "$work/ro" || exit 77
${train[*]} --epochs 1 --checkpoint-dir "$work/ro" >"$work/ro.log" 2>&1
echo \$? >"$work/ro.status"
EOF
  private_mounts "bash $work/inside.sh"
  [[ $? -eq 77 ]] && { echo "skipped: tmpfs or bind mounts are not allowed here"; exit 77; }
  [[ $(cat "$work/full.status") -eq 1 ]] || fail "full metrics disk: status $(cat "$work/full.status"): $(tail -3 "$work/full.log")"
  line=$(grep "error" "$work/full.log")
  grep -q "cannot write the metrics file '$work/small/m.csv': no space left on the device; training stopped at step [0-9]* (checkpoint $work/ckpt/ckpt-[0-9]*.h5 written)" <<<"$line" ||
    fail "full metrics disk: $(tail -3 "$work/full.log")"
  [[ $(grep -c . <<<"$line") -eq 1 ]] || fail "not one line: $line"
  model_digest "$(ls "$work"/ckpt/ckpt-*.h5 | tail -1)" >/dev/null || fail "the checkpoint does not read"
  echo "ok: full metrics disk: $line"
  [[ $(cat "$work/data.status") -eq 1 ]] || fail "kdp-data on a full disk: status $(cat "$work/data.status")"
  [[ $(grep -c . "$work/data.log") -eq 1 ]] && grep -q "cannot write '$work/small/data.h5': no space left on the device" "$work/data.log" ||
    fail "kdp-data on a full disk: $(cat "$work/data.log")"
  echo "ok: kdp-data on a full disk: $(cat "$work/data.log")"
  grep -q "cannot write in the checkpoint directory '$work/ro': read-only file system" "$work/ro.log" ||
    fail "read-only directory: $(cat "$work/ro.log")"
  echo "ok: read-only checkpoint directory: $(grep error "$work/ro.log")"
  ;;

kdp_data_outputs)
  # An existing output is written only when asked, and only when it is a kdp
  # dataset; a checkpoint is never written into.
  img=("--images" "$work/idx/train-images.idx.gz" "--labels" "$work/idx/train-labels.idx.gz")
  before=$(sha256sum <"$work/tiny.h5")
  expect "import over a dataset" 1 "already has a 'train' split; --overwrite replaces it" \
    "$bin/kdp-data" import-idx "${img[@]}" --out "$work/tiny.h5" --split train
  expect "fashion-mnist over a dataset" 1 "already has a 'train' split" \
    "$bin/kdp-data" import-fashion-mnist --out "$work/tiny.h5"
  expect "--add-split of a split it has" 1 "already has a 'train' split" \
    "$bin/kdp-data" import-idx "${img[@]}" --out "$work/tiny.h5" --split train --add-split
  [[ $(sha256sum <"$work/tiny.h5") == "$before" ]] || fail "the dataset changed"
  "${train[@]}" --epochs 1 --checkpoint-dir "$work/run" >/dev/null 2>&1 || fail "training failed"
  ckpt=$(ls "$work"/run/ckpt-*.h5 | tail -1)
  before=$(sha256sum <"$ckpt")
  for flag in "" --overwrite --add-split; do
    expect "import into a checkpoint ${flag:-without a flag}" 1 "is a kdp checkpoint (HDF5), not a kdp dataset: kdp never replaces it" \
      "$bin/kdp-data" import-idx "${img[@]}" --out "$ckpt" --split test $flag
  done
  [[ $(sha256sum <"$ckpt") == "$before" ]] || fail "the checkpoint changed"
  expect "--overwrite replaces a split" 0 "imported train split" \
    "$bin/kdp-data" import-idx "${img[@]}" --out "$work/tiny.h5" --split train --overwrite
  "${train[@]}" --epochs 1 >/dev/null 2>&1 || fail "the dataset lost its test split"
  # An IDX file of zero samples, a FIFO, a typo.
  py "$work" <<<'import sys
open(sys.argv[1] + "/zero.idx", "wb").write(bytes([0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28]))
open(sys.argv[1] + "/zero-labels.idx", "wb").write(bytes([0, 0, 8, 1, 0, 0, 0, 0]))'
  one_line "an IDX file of zero samples" "$bin/kdp-data" import-idx --images "$work/zero.idx" \
    --labels "$work/zero-labels.idx" --out "$work/zero.h5" --split train
  [[ ! -e $work/zero.h5 ]] || fail "a file was left for the zero-sample import"
  mkfifo "$work/fifo"
  one_line "kdp-data info of a FIFO" "$bin/kdp-data" info "$work/fifo"
  one_line "import-idx of a FIFO" "$bin/kdp-data" import-idx --images "$work/fifo" \
    --labels "$work/fifo" --out "$work/f.h5"
  expect "a typo" 1 "unknown option '--splt' (did you mean --split?)" \
    "$bin/kdp-data" import-idx "${img[@]}" --out "$work/new.h5" --splt train
  ;;

overwrite_keeps_foreign)
  # --overwrite removes checkpoints of kdp runs, nothing else: a dataset named
  # like a checkpoint stays, named in a warning; a user's notes as best.h5
  # (where the run writes its own) are moved to rejected/, also named.
  "${train[@]}" --epochs 1 --checkpoint-dir "$work/run" >/dev/null 2>&1 || fail "training failed"
  cp "$work/tiny.h5" "$work/run/ckpt-000000999.h5"
  echo "my notes" >"$work/run/best.h5"
  keep=$(sha256sum <"$work/run/ckpt-000000999.h5") notes=$(sha256sum <"$work/run/best.h5")
  out=$("${train[@]}" --model 784,8,10 --epochs 1 --checkpoint-dir "$work/run" --overwrite 2>&1) ||
    fail "--overwrite failed: $(tail -3 <<<"$out")"
  grep -q "warning: overwrite left '$work/run/ckpt-000000999.h5' as it is: it is not kdp's" <<<"$out" ||
    fail "no warning names the dataset: $out"
  grep -q "warning: '$work/run/best.h5' is not kdp's (.*); overwrite moved it to '$work/run/rejected/best.h5'" <<<"$out" ||
    fail "no warning names best.h5: $out"
  [[ $(sha256sum <"$work/run/ckpt-000000999.h5") == "$keep" ]] || fail "the dataset changed"
  [[ $(sha256sum <"$work/run/rejected/best.h5") == "$notes" ]] || fail "the notes changed"
  [[ -e $work/run/ckpt-000000015.h5 ]] || fail "the new run wrote no checkpoint"
  echo "ok: --overwrite kept the files that are not kdp's:"
  grep "warning" <<<"$out" | sed 's/^/    | /'
  ;;

hostile_inputs)
  # Sizes that overflow, inputs that block, typos, poisoned checkpoints,
  # datasets that cannot be trained on: one line, exit 1, within seconds.
  start=$SECONDS
  one_line "a layer of 2^62" "${train[@]}" --model 784,4611686018427387904,10
  one_line "a 4 TB model" "${train[@]}" --model 784,1000000,1000000,10
  ((SECONDS - start < 20)) || fail "the size checks took $((SECONDS - start)) s"
  mkfifo "$work/fifo"
  one_line "--data a FIFO" "${train[@]}" --data "$work/fifo"
  expect "an unknown option" 1 "unknown option '--checkpoint_dir' (did you mean --checkpoint-dir?)" \
    "${train[@]}" --keep-last 1 --checkpoint_dir "$work/x"
  expect "a shortened option" 1 "unknown option '--keep' (did you mean --keep-last?)" \
    "${train[@]}" --keep 0
  [[ ! -e $work/x ]] || fail "the mistyped run wrote something"
  expect "Kokkos' own options pass" 0 "test_accuracy=" "${train[@]}" --epochs 1 --kokkos-disable-warnings
  expect "the largest seed" 0 "test_accuracy=" "${train[@]}" --epochs 1 --seed 18446744073709551615
  one_line "a learning rate below float's range" "${train[@]}" --lr 1e-320
  one_line "a batch beyond the dataset" "${train[@]}" --batch-size 99999999999
  # A checkpoint with a NaN weight: refused by name on --resume FILE; with
  # --resume auto moved to rejected/ and the one before used.
  "${train[@]}" --epochs 2 --checkpoint-dir "$work/run" >/dev/null 2>&1 || fail "training failed"
  py "$work/run/ckpt-000000030.h5" <<<'import h5py,sys,numpy as np
f = h5py.File(sys.argv[1], "a"); w = f["model/2.weight"]; v = w[()]; v[1, 3] = np.nan; w[...] = v'
  expect "--resume a checkpoint holding NaN" 1 "/model/2.weight' in '$work/run/ckpt-000000030.h5' holds NaN at index 19 (position [1, 3])" \
    "${train[@]}" --epochs 3 --resume "$work/run/ckpt-000000030.h5" --checkpoint-dir "$work/other"
  expect "--resume auto past a checkpoint holding NaN" 0 "resumed from $work/run/ckpt-000000015.h5" \
    "${train[@]}" --epochs 3 --checkpoint-dir "$work/run" --resume auto
  all_finite "$work"/run/*.h5 || fail "a checkpoint with NaN is still among the run's"
  # Datasets that cannot be trained on.
  py "$work" <<'PY'
import h5py, numpy as np, sys
d = sys.argv[1]
with h5py.File(d + "/empty.h5", "w") as f:
    f.attrs["format"] = "kdp-dataset"
    for split, n in (("train", 0), ("test", 10)):
        g = f.create_group(split)
        g.create_dataset("images", data=np.zeros((n, 28, 28), np.uint8))
        g.create_dataset("labels", data=np.zeros((n,), np.uint8))
        g.attrs["num_classes"] = 10
with h5py.File(d + "/mixed.h5", "w") as f:
    for split, dtype in (("train", np.float64), ("test", np.uint8)):
        g = f.create_group(split)
        g.create_dataset("images", data=np.ones((50, 28, 28), dtype))
        g.create_dataset("labels", data=np.arange(50, dtype=np.uint8) % 10)
        g.attrs["num_classes"] = 10
PY
  one_line "no training samples" "${train[@]}" --data "$work/empty.h5"
  expect "splits of two kinds" 1 "/train/images' of '$work/mixed.h5' is float64 [784] but '/test/images' of '$work/mixed.h5' is uint8 [784]" \
    "${train[@]}" --data "$work/mixed.h5"
  # run.json and metrics paths that are not what they claim.
  mkdir -p "$work/j"
  "${train[@]}" --epochs 1 --checkpoint-dir "$work/j" >/dev/null 2>&1 || fail "training failed"
  : >"$work/j/run.json"
  one_line "an empty run.json" "${train[@]}" --epochs 1 --checkpoint-dir "$work/j" --resume auto
  echo "{not json" >"$work/j/run.json"
  one_line "a run.json that is not JSON" "${train[@]}" --epochs 1 --checkpoint-dir "$work/j" --resume auto
  rm "$work/j/run.json" && mkdir "$work/j/run.json"
  one_line "a run.json that is a directory" "${train[@]}" --epochs 1 --checkpoint-dir "$work/j" --resume auto
  one_line "metrics into a directory" "${train[@]}" --epochs 1 --metrics "$work/j"
  one_line "metrics into /dev/null" "${train[@]}" --epochs 1 --metrics /dev/null
  ;;

signals)
  # Exit 75 only when a checkpoint was written: without --checkpoint-dir a
  # SIGTERM ends with 128 + 15 and says that nothing can be resumed.
  "${train[@]}" --epochs 100000 >"$work/term.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do grep -q "step 20 " "$work/term.log" && break; sleep 0.05; done
  kill -TERM "$pid"
  wait "$pid"
  status=$?
  [[ $status -eq 143 ]] || fail "SIGTERM without checkpoints: status $status, wanted 143: $(tail -2 "$work/term.log")"
  grep -q "no checkpoint was written (there is no --checkpoint-dir), so nothing can be resumed; exit 143" \
    "$work/term.log" || fail "no message: $(tail -2 "$work/term.log")"
  echo "ok: SIGTERM without checkpoints: $(grep -o 'stopped by signal.*' "$work/term.log")"
  # A SIGTERM as soon as the process can take it (its handler is the first
  # thing main installs), long before training: a message, the signal's status.
  "${train[@]}" --epochs 1 >"$work/early.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 2000); do
    mask=$(awk '/^SigCgt/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    [[ -n $mask ]] && (((0x$mask >> 14) & 1)) && break  # bit 14: SIGTERM (15)
  done
  kill -TERM "$pid"
  wait "$pid"
  status=$?
  [[ $status -eq 143 ]] || fail "an early SIGTERM: status $status: $(cat "$work/early.log")"
  grep -q "stopped by signal 15" "$work/early.log" || fail "an early SIGTERM: no message: $(cat "$work/early.log")"
  echo "ok: an early SIGTERM: $(grep -o 'stopped by signal.*' "$work/early.log")"
  ;;

output_options)
  # Every output option under one rule: the user's dataset named as an output
  # is refused with and without --overwrite and left byte for byte; a path kdp
  # cannot write is refused as unwritable before training; kdp's own file of
  # the kind is replaced only with --overwrite.
  mkdir "$work/outs"
  cp "$work/tiny.h5" "$work/outs/mine.h5"
  py "$work/outs/theirs.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["fields"] = np.arange(12, dtype=np.float32).reshape(3, 4)
PY
  before=$(snapshot "$work/outs")
  mine=$work/outs/mine.h5
  short=("${train[@]}" --epochs 1 --max-steps 2)
  for flag in "" --overwrite; do
    one_line "--trace at a dataset ${flag:-(no flag)}" "${short[@]}" --trace "$mine" $flag
    one_line "--status-file at a dataset ${flag:-(no flag)}" "${short[@]}" --status-file "$mine" $flag
    expect "--metrics at a dataset ${flag:-(no flag)}" 1 "'$mine' is a kdp dataset (HDF5), not a kdp metrics file" \
      "${short[@]}" --metrics "$mine" $flag
    one_line "--checkpoint-dir at a dataset ${flag:-(no flag)}" "${short[@]}" --checkpoint-dir "$mine" $flag
    one_line "--trace at the user's HDF5 file ${flag:-(no flag)}" "${short[@]}" --trace "$work/outs/theirs.h5" $flag
    one_line "kdp-data --out at the user's HDF5 file ${flag:-(no flag)}" "$bin/kdp-data" import-idx \
      --images "$work/idx/train-images.idx.gz" --labels "$work/idx/train-labels.idx.gz" \
      --out "$work/outs/theirs.h5" --split train $flag
  done
  expect "kdp-data --out names the user's file" 1 "'$work/outs/theirs.h5' is an HDF5 file, not a kdp dataset" \
    "$bin/kdp-data" import-fashion-mnist --out "$work/outs/theirs.h5" --overwrite
  expect "kdp-data --out where kdp cannot write" 1 "cannot write the dataset '/proc/version'" \
    "$bin/kdp-data" import-fashion-mnist --out /proc/version
  unchanged "a dataset named as an output" "$before" "$work/outs"
  for option in --trace --status-file; do
    expect "$option at a dataset names it" 1 "'$mine' is a kdp dataset (HDF5), not a kdp" \
      "${short[@]}" $option "$mine" --overwrite
    expect "$option where kdp cannot write" 1 "cannot write the" "${short[@]}" $option /proc/version
  done
  expect "--metrics where kdp cannot write" 1 "cannot write the metrics file '/proc/version'" \
    "${short[@]}" --metrics /proc/version

  # kdp's own trace and status: kept without --overwrite, replaced with it.
  "${short[@]}" --trace "$work/outs/run.json" --status-file "$work/outs/status" >/dev/null ||
    fail "a run with --trace and --status-file"
  [[ $(cat "$work/outs/status") == 0 ]] || fail "the status file holds '$(cat "$work/outs/status")'"
  kept=$(snapshot "$work/outs")
  one_line "an existing trace without --overwrite" "${short[@]}" --trace "$work/outs/run.json"
  one_line "an existing status file without --overwrite" "${short[@]}" --status-file "$work/outs/status"
  unchanged "kdp's own files without --overwrite" "$kept" "$work/outs"
  "${short[@]}" --trace "$work/outs/run.json" --status-file "$work/outs/status" --overwrite \
    >/dev/null || fail "--overwrite over kdp's own trace and status file"
  [[ $(snapshot "$work/outs") != "$kept" ]] || fail "--overwrite replaced nothing"

  # The plot: scripts/plot_metrics asks kdp-data for the rule.
  "${short[@]}" --metrics "$work/outs/m.csv" >/dev/null || fail "a run with --metrics"
  plot=(env KDP_DATA="$bin/kdp-data" /usr/bin/python3 "$src/../scripts/plot_metrics")
  "${plot[@]}" "$work/outs/m.csv" "$work/outs/m.png" >/dev/null || fail "the first plot"
  kept=$(snapshot "$work/outs")
  expect "a plot at a dataset" 1 "'$mine' is a kdp dataset (HDF5), not a kdp plot" \
    "${plot[@]}" "$work/outs/m.csv" "$mine" --overwrite
  expect "an existing plot without --overwrite" 1 "the plot '$work/outs/m.png' exists" \
    "${plot[@]}" "$work/outs/m.csv" "$work/outs/m.png"
  expect "a plot where kdp cannot write" 1 "cannot write the plot" \
    "${plot[@]}" "$work/outs/m.csv" /proc/version
  unchanged "plots refused" "$kept" "$work/outs"
  inode=$(stat -c %i "$work/outs/m.png")
  "${plot[@]}" "$work/outs/m.csv" "$work/outs/m.png" --overwrite >/dev/null ||
    fail "--overwrite over a plot"
  [[ $(stat -c %i "$work/outs/m.png") != "$inode" ]] || fail "--overwrite did not replace the plot"
  ;;

*)
  fail "unknown case '$case'"
  ;;
esac
