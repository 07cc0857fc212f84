#!/usr/bin/env bash
# kdp-train and kdp-data used badly: each case must end with a non-zero exit and
# a message naming what is wrong; a short good run and the help must work.
#
#   kdp_train_cli.sh BUILD_EXAMPLES_DIR TESTS_SOURCE_DIR
set -u
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1
failures=0

check() {  # check NAME EXPECTED_STATUS TEXT COMMAND...
  local name=$1 want=$2 text=$3
  shift 3
  local out status
  out=$("$@" 2>&1)
  status=$?
  if [[ $want == nonzero && $status -eq 0 ]] || [[ $want != nonzero && $status -ne $want ]]; then
    echo "FAIL $name: exit status $status (wanted $want)"
    echo "$out" | tail -5
    failures=$((failures + 1))
  elif ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL $name: the output lacks '$text':"
    echo "$out" | tail -5
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

/usr/bin/python3 "$src/train/make_tiny_dataset.py" "$work/idx" || exit 1
for split in train test; do
  "$bin/kdp-data" import-idx --images "$work/idx/$split-images.idx.gz" \
    --labels "$work/idx/$split-labels.idx.gz" --out "$work/tiny.h5" --split "$split" >/dev/null || exit 1
done
train=("$bin/kdp-train" --data "$work/tiny.h5" --progress lines --batch-size 40)

check "help" 0 "--checkpoint-dir" "$bin/kdp-train" --help
check "missing data file" nonzero "$work/none.h5" "${train[@]}" --data "$work/none.h5"
echo "not an HDF5 file" >"$work/text.h5"
check "malformed data file" nonzero "$work/text.h5" "${train[@]}" --data "$work/text.h5"
check "model input does not match the data" nonzero "starts with 100 inputs" \
  "${train[@]}" --model 100,10
check "model output does not match the classes" nonzero "ends with 7 outputs" \
  "${train[@]}" --model 784,7
check "bad model sizes" nonzero "is not a positive layer size" "${train[@]}" --model 784,x,10
check "batch smaller than ranks x devices" nonzero "smaller than ranks x devices" \
  "${train[@]}" --devices 4 --batch-size 2
check "unknown optimizer" nonzero "optimizer" "${train[@]}" --optimizer lion
check "resume auto without a directory" nonzero "resume = auto needs a checkpoint_dir" \
  "${train[@]}" --resume auto
check "short run" 0 "test_accuracy=" \
  "${train[@]}" --model 784,32,10 --epochs 1 --checkpoint-dir "$work/ckpt"
ckpt=$(ls "$work"/ckpt/ckpt-*.h5 | tail -1)

# The checkpoint as docs/checkpoint-format.md describes it, read with h5py.
out=$("${train[@]}" --model 784,32,10 --epochs 2 --checkpoint-dir "$work/h5py" 2>&1)
accuracy=$(grep -o 'test_accuracy=[0-9.]*' <<<"$out" | cut -d= -f2)
last=$(ls "$work"/h5py/ckpt-*.h5 | tail -1)
if /usr/bin/python3 "$src/io/read_checkpoint_h5py.py" "$last" "$work/tiny.h5" "$accuracy"; then
  echo "ok   checkpoint read with h5py"
else
  echo "FAIL checkpoint read with h5py"
  failures=$((failures + 1))
fi
check "checkpoint of another model" nonzero "does not fit this model" \
  "${train[@]}" --model 784,64,10 --epochs 2 --resume "$ckpt"
check "missing checkpoint" nonzero "$work/nothing.h5" \
  "${train[@]}" --model 784,32,10 --resume "$work/nothing.h5"
check "kdp-data missing input" nonzero "File does not exist" \
  "$bin/kdp-data" import-idx --images "$work/none.gz" --labels "$work/none.gz" --out "$work/o.h5"
check "kdp-data info of a missing file" nonzero "$work/none.h5" "$bin/kdp-data" info "$work/none.h5"
check "kdp-data info" 0 "/train/images  uint8 [600, 28, 28]" "$bin/kdp-data" info "$work/tiny.h5"

if ((failures > 0)); then
  echo "$failures case(s) failed"
  exit 1
fi
