#!/usr/bin/env bash
# kdp-train and kdp-data used badly: each case must end with a non-zero exit and
# a message naming what is wrong; a short good run and the help must work.
#
#   kdp_train_cli.sh TOOLS_DIR TESTS_SOURCE_DIR
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
    --labels "$work/idx/$split-labels.idx.gz" --out "$work/tiny.h5" --split "$split" --add-split >/dev/null || exit 1
done
train=("$bin/kdp-train" --data "$work/tiny.h5" --progress lines --batch-size 40)

check "help" 0 "--checkpoint-dir" "$bin/kdp-train" --help
check "missing data file" 1 "cannot open '$work/none.h5': no such file" \
  "${train[@]}" --data "$work/none.h5"
echo "not an HDF5 file" >"$work/text.h5"
check "malformed data file" 1 "cannot open '$work/text.h5': it is not an HDF5 file" \
  "${train[@]}" --data "$work/text.h5"
# libhdf5's own error stack reaches the terminal only when KDP_DEBUG asks.
mkdir -p "$work/dir.h5"
for bad in "$work/text.h5" "$work/none.h5" "$work/dir.h5"; do
  out=$("${train[@]}" --data "$bad" 2>&1)
  # (Kokkos' OpenMP backend may print its own advice; kdp's part is one line.)
  if grep -qE "HDF5-DIAG|time = |tent_flags|#[0-9]{3}:" <<<"$out" ||
    [[ $(grep -c "kdp" <<<"$out") -ne 1 ]]; then
    echo "FAIL file error for $bad is not one line:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok   one line for $bad: $out"
  fi
done
check "KDP_DEBUG shows libhdf5's error stack" 1 "HDF5-DIAG" \
  env KDP_DEBUG=1 "${train[@]}" --data "$work/text.h5"

# Numeric options: one sentence naming the option, the rule and the value.
check "epochs below 1" 1 "--epochs must be at least 1 (got -3)" "${train[@]}" --epochs -3
check "epochs not a number" 1 "--epochs must be a whole number (got 'ten')" \
  "${train[@]}" --epochs ten
check "epochs overflowing" 1 "--epochs must be a whole number (got '1e400')" \
  "${train[@]}" --epochs 1e400
check "learning rate zero" 1 "--lr must be greater than 0 (got 0)" "${train[@]}" --lr 0
check "learning rate infinite" 1 "--lr must be a finite number (got '1e400')" \
  "${train[@]}" --lr 1e400
check "negative momentum" 1 "--momentum must be at least 0 (got -0.5)" \
  "${train[@]}" --momentum -0.5
check "batch size zero" 1 "--batch-size must be at least 1 (got 0)" \
  "${train[@]}" --batch-size 0
check "keep-last zero" 1 "--keep-last must be at least 1 (got 0)" "${train[@]}" --keep-last 0
check "devices zero" 1 "--devices must be at least 1 (got 0)" "${train[@]}" --devices 0
check "negative seed" 1 "--seed must be at least 0 (got -1)" "${train[@]}" --seed -1
check "max-steps below -1" 1 \
  "--max-steps must be -1 (no limit) or a number of steps (got '-5')" \
  "${train[@]}" --max-steps -5
check "accumulate zero" 1 "--accumulate must be at least 1 (got 0)" \
  "${train[@]}" --accumulate 0
check "negative threads" 1 "--threads must be at least 0 (got -2)" "${train[@]}" --threads -2
check "negative gradient clip" 1 "--grad-clip must be at least 0 (got -1)" \
  "${train[@]}" --grad-clip -1
check "log-every zero" 1 "--log-every must be at least 1 (got 0)" "${train[@]}" --log-every 0
check "checkpoint-every negative" 1 "--checkpoint-every must be at least 0 (got -1)" \
  "${train[@]}" --checkpoint-every -1
check "weight decay not a number" 1 "--weight-decay must be a number (got 'x')" \
  "${train[@]}" --weight-decay x
check "kdp-data classes zero" 1 "--classes must be at least 1 (got 0)" \
  "$bin/kdp-data" import-idx --images "$work/idx/train-images.idx.gz" \
  --labels "$work/idx/train-labels.idx.gz" --out "$work/o.h5" --classes 0
check "kdp-data classes above a byte" 1 "--classes must be at most 256 (got 300)" \
  "$bin/kdp-data" import-idx --images "$work/idx/train-images.idx.gz" \
  --labels "$work/idx/train-labels.idx.gz" --out "$work/o.h5" --classes 300
check "model input does not match the data" 1 "starts with 100 inputs" \
  "${train[@]}" --model 100,10
check "model output does not match the classes" 1 "ends with 7 outputs" \
  "${train[@]}" --model 784,7
/usr/bin/python3 - "$work/tiny.h5" "$work/regression.h5" <<'PY'
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    for split in ("train", "test"):
        n = f[split]["labels"].shape[0]
        del f[split]["labels"]
        f[split]["labels"] = np.linspace(0.0, 1.0, n, dtype=np.float32)
PY
reg=("$bin/kdp-train" --data "$work/regression.h5" --progress lines --batch-size 40 --epochs 1)
check "a regression's model must end with its targets" 1 "ends with 10 outputs but '/train/images'" \
  "${reg[@]}"
check "cross entropy on float targets" 1 "takes class indices, but the targets of" \
  "${reg[@]}" --model 784,16,1 --loss cross_entropy
check "a regression loss on classes" 1 "--loss mse is a regression loss, but the targets of" \
  "${train[@]}" --loss mse
check "stop-at-accuracy on a regression" 1 "--stop-at-accuracy 0.5 needs classes" \
  "${reg[@]}" --model 784,16,1 --stop-at-accuracy 0.5
check "a regression trains" 0 "val_r2=" "${reg[@]}" --model 784,16,1 --loss huber
check "one set of samples, a tenth held out" 0 "test_accuracy=" \
  "${train[@]}" --inputs /train/images --targets /train/labels --model 784,16,10 --epochs 1
check "held out and a validation file at once" 1 "both name the validation samples" \
  "${train[@]}" --val-fraction 0.2 --val-data "$work/tiny.h5"
check "a held-out fraction of all" 1 "--val-fraction 1.5 leaves no training samples" \
  "${train[@]}" --val-fraction 1.5
check "a dataset that is not there" 1 "/train/fields" "${train[@]}" --inputs fields
check "class targets are not standardised" 1 "are class indices, not values to standardise" \
  "${train[@]}" --standardise-targets
check "kdp-data info: what kdp-train would read" 0 "float targets [] (a regression)" \
  "$bin/kdp-data" info "$work/regression.h5"
check "kdp-data info: a held-out part" 0 "validation: the 0.1 held out of '/train/images'" \
  "$bin/kdp-data" info "$work/tiny.h5" --inputs /train/images --targets /train/labels
check "kdp-data info: why kdp-train would refuse" 0 "it would refuse the file" \
  "$bin/kdp-data" info "$work/tiny.h5" --inputs fields
check "bad model sizes" 1 "is not a positive layer size" "${train[@]}" --model 784,x,10
check "batch smaller than ranks x devices" 1 "smaller than ranks x devices" \
  "${train[@]}" --devices 4 --batch-size 2
check "unknown optimizer" 1 "optimizer" "${train[@]}" --optimizer lion
check "resume auto without a directory" 1 "resume = auto needs a checkpoint_dir" \
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
# A CNN with BatchNorm, the same way (docs/checkpoint-format.md's CNN recipe).
cnn="conv(4,3,1,1),batchnorm,relu,maxpool(2),conv(8,3),relu,avgpool(2),flatten,linear(10)"
out=$("${train[@]}" --model "$cnn" --epochs 2 --checkpoint-dir "$work/cnn" 2>&1)
accuracy=$(grep -o 'test_accuracy=[0-9.]*' <<<"$out" | cut -d= -f2)
last=$(ls "$work"/cnn/ckpt-*.h5 | tail -1)
if /usr/bin/python3 "$src/io/read_checkpoint_h5py.py" "$last" "$work/tiny.h5" "$accuracy"; then
  echo "ok   CNN checkpoint read with h5py"
else
  echo "FAIL CNN checkpoint read with h5py: $(tail -3 <<<"$out")"
  failures=$((failures + 1))
fi
check "checkpoint of another model" 1 "belongs to another run configuration" \
  "${train[@]}" --model 784,64,10 --epochs 2 --resume "$ckpt"
check "missing checkpoint" 1 "$work/nothing.h5" \
  "${train[@]}" --model 784,32,10 --resume "$work/nothing.h5"
check "kdp-data missing input" 1 "cannot open IDX file '$work/none.gz': no such file" \
  "$bin/kdp-data" import-idx --images "$work/none.gz" --labels "$work/none.gz" --out "$work/o.h5"
check "kdp-data info of a missing file" 1 "cannot open '$work/none.h5': no such file" \
  "$bin/kdp-data" info "$work/none.h5"
check "kdp-data info" 0 "/train/images  uint8 [600, 28, 28]" "$bin/kdp-data" info "$work/tiny.h5"

if ((failures > 0)); then
  echo "$failures case(s) failed"
  exit 1
fi
