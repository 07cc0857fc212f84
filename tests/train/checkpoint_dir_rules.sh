#!/usr/bin/env bash
# A run never destroys another run's work: kdp-train against checkpoint
# directories of other runs, damaged checkpoints and allowed changes.
#
#   checkpoint_dir_rules.sh BIN_DIR TESTS_SOURCE_DIR CASE
#
# KDP_MPIEXEC: the MPI launcher with its flags up to the rank count, e.g.
# "mpiexec --allow-run-as-root --oversubscribe -n" (CMake sets it).
set -u
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
case=$3
. "$src/reliability/common.sh"
make_tiny_data
train=("$bin/kdp-train" --data "$work/tiny.h5" --batch-size 40 --threads 1 --progress lines
       --log-every 1000000)

# Every file under a directory with its checksum: what "nothing changed" compares.
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum); }

# A finished run of 784-32-10 with checkpoints (steps 15 and 30) and best.h5.
earlier_run() {  # DIR [extra options]
  local dir=$1
  shift
  "${train[@]}" --model 784,32,10 --epochs 2 --checkpoint-dir "$dir" --metrics "$dir.csv" "$@" \
    >"$work/earlier.log" 2>&1 || fail "the earlier run failed: $(tail -3 "$work/earlier.log")"
  [[ -f $dir/best.h5 && -f $dir/run.json ]] || fail "the earlier run left no best.h5/run.json"
}

expect_refusal() {  # NAME TEXT DIR COMMAND...: exit 1, TEXT in the output, DIR unchanged
  local name=$1 text=$2 dir=$3
  shift 3
  local before after out status
  before=$(snapshot "$dir")
  out=$("$@" 2>&1)
  status=$?
  after=$(snapshot "$dir")
  [[ $status -eq 1 ]] || fail "$name: exit status $status, wanted 1: $(tail -5 <<<"$out")"
  grep -qF -- "$text" <<<"$out" || fail "$name: the message lacks '$text': $out"
  [[ $before == "$after" ]] || fail "$name: the directory changed:
$(diff <(echo "$before") <(echo "$after"))"
  echo "ok: $name: exit 1, $(grep -c . <<<"$before") files unchanged"
  echo "$out" | sed 's/^/    | /'
}

case $case in
other_model)
  # The user's typo: another --model in a finished run's directory, with and
  # without --resume. Nothing may be written; the message shows both settings.
  earlier_run "$work/run"
  for resume in auto never; do
    expect_refusal "another model, --resume $resume" "belongs to another run configuration" \
      "$work/run" "${train[@]}" --model 784,16,10 --epochs 1 --checkpoint-dir "$work/run" \
      --resume "$resume"
  done
  out=$("${train[@]}" --model 784,16,10 --epochs 1 --checkpoint-dir "$work/run" 2>&1)
  grep -qE "model +784,16,10 +784,32,10" <<<"$out" || fail "the settings are not side by side: $out"
  grep -qF -- "--resume never --overwrite" <<<"$out" || fail "no way out is named: $out"
  # Other settings that define the run count too; epochs and threads do not.
  expect_refusal "another learning rate" "lr " "$work/run" \
    "${train[@]}" --model 784,32,10 --lr 0.01 --epochs 3 --checkpoint-dir "$work/run" --resume auto
  ;;

legacy_directory)
  # Checkpoints written before configurations were recorded (no run.json, no
  # /run): their model still shows, and another model is refused.
  earlier_run "$work/run"
  rm "$work/run/run.json"
  for f in "$work"/run/*.h5; do
    /usr/bin/python3 -c "import h5py,sys; f=h5py.File(sys.argv[1],'a'); del f['run']" "$f" ||
      fail "cannot strip /run from $f"
  done
  expect_refusal "another model in an old directory" "parameters" "$work/run" \
    "${train[@]}" --model 784,16,10 --epochs 3 --checkpoint-dir "$work/run" --resume auto
  out=$("${train[@]}" --model 784,32,10 --epochs 3 --checkpoint-dir "$work/run" --resume auto 2>&1) ||
    fail "the same model did not resume from an old directory: $(tail -3 <<<"$out")"
  grep -q "resumed from .*ckpt-000000030.h5" <<<"$out" || fail "not resumed: $out"
  echo "ok: the same model resumes from an old directory"
  ;;

fresh_over_existing)
  # A fresh start where this run's checkpoints are: refused; --overwrite discards.
  earlier_run "$work/run"
  expect_refusal "fresh start over this run's checkpoints" "--resume auto to continue" \
    "$work/run" "${train[@]}" --model 784,32,10 --epochs 1 --checkpoint-dir "$work/run"
  expect_refusal "--overwrite without --resume never" "goes with --resume never" "$work/run" \
    "${train[@]}" --model 784,32,10 --epochs 1 --checkpoint-dir "$work/run" --resume auto --overwrite
  expect_refusal "a fresh start over a metrics file" "metrics" "$work" \
    "${train[@]}" --model 784,32,10 --epochs 1 --checkpoint-dir "$work/new" --metrics "$work/run.csv"
  rm -rf "$work/new"
  out=$("${train[@]}" --model 784,16,10 --epochs 1 --checkpoint-dir "$work/run" --resume never \
    --overwrite --metrics "$work/run.csv" 2>&1) || fail "--overwrite failed: $(tail -3 <<<"$out")"
  grep -q "discarded 3 checkpoint(s)" <<<"$out" || fail "the discard is not reported: $out"
  ls "$work"/run/ckpt-*.h5 | grep -q "ckpt-000000015.h5" || fail "no checkpoint of the new run"
  grep -q '"784,16,10"' "$work/run/run.json" || fail "run.json does not name the new model"
  echo "ok: --resume never --overwrite replaced the run"
  ;;

truncated_newest)
  # The newest checkpoint is cut short: a warning names it, it moves to
  # rejected/, and the run resumes from the one before, exactly as a run
  # resumed from that one directly.
  earlier_run "$work/run" --checkpoint-every 10
  mapfile -t ckpts < <(ls "$work"/run/ckpt-*.h5)
  newest=${ckpts[-1]}
  previous=${ckpts[-2]}
  cp "$previous" "$work/previous.h5"
  head -c "$(($(stat -c %s "$newest") / 2))" "$newest" >"$work/cut" && cp "$work/cut" "$newest"
  out=$("${train[@]}" --model 784,32,10 --epochs 3 --checkpoint-dir "$work/run" --resume auto 2>&1) ||
    fail "resume failed: $(tail -5 <<<"$out")"
  grep -q "warning: skipped checkpoint '$newest'" <<<"$out" || fail "no warning names it: $out"
  grep -q "resumed from $previous" <<<"$out" || fail "not resumed from $previous: $out"
  cmp -s "$work/run/rejected/$(basename "$newest")" "$work/cut" ||
    fail "the damaged checkpoint was not kept in rejected/"
  "${train[@]}" --model 784,32,10 --epochs 3 --checkpoint-dir "$work/direct" \
    --resume "$work/previous.h5" >"$work/direct.log" 2>&1 ||
    fail "the direct resume failed: $(tail -3 "$work/direct.log")"
  a=$(model_digest "$(ls "$work"/run/ckpt-*.h5 | tail -1)")
  b=$(model_digest "$(ls "$work"/direct/ckpt-*.h5 | tail -1)")
  [[ $a == "$b" ]] || fail "the final weights differ from a run resumed from $previous directly"
  echo "ok: truncated newest: warned, moved to rejected/, final weights equal ($a)"
  ;;

all_corrupt)
  # No checkpoint can be resumed from: exit 1, and nothing is touched.
  earlier_run "$work/run"
  for f in "$work"/run/ckpt-*.h5; do head -c 100 "$f" >"$work/cut" && cp "$work/cut" "$f"; done
  expect_refusal "every checkpoint corrupt" "can be resumed from" "$work/run" \
    "${train[@]}" --model 784,32,10 --epochs 3 --checkpoint-dir "$work/run" --resume auto
  [[ ! -e $work/run/rejected ]] || fail "files were moved although the run did not start"
  ;;

damaged_run_json)
  # A run.json that is not JSON, or JSON of other types: refused by name,
  # nothing written or moved.
  earlier_run "$work/run"
  for text in 'not json' '{"format": 5, "settings": {}}' \
    '{"format": "kdp-run-config", "version": "1", "settings": {}}'; do
    printf '%s' "$text" >"$work/run/run.json"
    expect_refusal "run.json holding $text" "run.json' is not a run configuration" "$work/run" \
      "${train[@]}" --model 784,32,10 --epochs 3 --checkpoint-dir "$work/run" --resume auto
  done
  ;;
allowed_change)
  # Epochs, threads and devices may change on resume.
  earlier_run "$work/run"
  out=$("${train[@]}" --model 784,32,10 --epochs 3 --threads 2 --devices 2 \
    --checkpoint-dir "$work/run" --resume auto 2>&1) || fail "resume failed: $(tail -5 <<<"$out")"
  grep -q "resumed from .*ckpt-000000030.h5" <<<"$out" || fail "not resumed: $out"
  grep -q "steps=45" <<<"$out" || fail "the third epoch did not run: $out"
  echo "ok: more epochs, threads and devices resume"
  ;;

other_model_2ranks)
  # The same refusal on every rank of a 2-rank job, each exiting 1.
  [[ -n ${KDP_MPIEXEC:-} ]] || { echo "no MPI launcher"; exit 77; }
  earlier_run "$work/run"
  read -r -a launch <<<"$KDP_MPIEXEC"
  before=$(snapshot "$work/run")
  out=$("${launch[@]}" 2 sh -c '"$@"; echo $? >"'"$work"'/status.$OMPI_COMM_WORLD_RANK$PMI_RANK"' \
    rank "${train[@]}" --model 784,16,10 --epochs 1 --checkpoint-dir "$work/run" --resume auto 2>&1)
  [[ $(cat "$work/status.0" 2>/dev/null) == 1 && $(cat "$work/status.1" 2>/dev/null) == 1 ]] ||
    fail "rank exit statuses $(cat "$work"/status.* 2>/dev/null | tr '\n' ' '), wanted 1 1: $out"
  [[ $(snapshot "$work/run") == "$before" ]] || fail "the directory changed"
  [[ $(grep -c "belongs to another run configuration" <<<"$out") -eq 1 ]] ||
    fail "wanted the message once (from rank 0): $out"
  echo "ok: both ranks exit 1, nothing written"
  echo "$out" | sed 's/^/    | /'
  ;;

*)
  fail "unknown case '$case'"
  ;;
esac
