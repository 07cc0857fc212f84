# Shared by the reliability tests: a work directory, the tiny dataset, checks.
# Expects: bin (kdp-train's directory), src (the tests' source directory).
work=$(mktemp -d /tmp/kdp-reliability.XXXXXX)
# Kokkos' OpenMP backend advises on thread binding unless this is set; the
# messages checked here are kdp's alone.
export OMP_PROC_BIND=${OMP_PROC_BIND:-false}
trap 'rm -rf "$work"' EXIT
mpi_flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)

fail() {
  echo "FAIL: $*"
  exit 1
}

make_tiny_data() {  # -> $work/tiny.h5
  /usr/bin/python3 "$src/train/make_tiny_dataset.py" "$work/idx" || fail "dataset"
  for split in train test; do
    "$bin/kdp-data" import-idx --images "$work/idx/$split-images.idx.gz" \
      --labels "$work/idx/$split-labels.idx.gz" --out "$work/tiny.h5" --split "$split" --add-split >/dev/null ||
      fail "import"
  done
}

make_uneven_data() {  # -> $work/uneven.h5: tiny.h5 with 602 training samples
  make_tiny_data
  /usr/bin/python3 - "$work/tiny.h5" "$work/uneven.h5" <<'PY' || fail "the 602-sample dataset"
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    for name in ("images", "labels"):
        d = f["train"][name][()]
        del f["train"][name]
        f["train"][name] = np.concatenate([d, d[:2]])
PY
}

# The /model and /optimizer datasets of a checkpoint as one digest; for a
# file that cannot be read, a line that equals no other (so a comparison of
# two missing files fails too).
state_digest() {
  /usr/bin/python3 - "$1" <<'PY' || echo "unreadable $1 $RANDOM$RANDOM"
import hashlib, sys, h5py
h = hashlib.sha256()
with h5py.File(sys.argv[1], "r") as f:
    def add(name, obj):
        if isinstance(obj, h5py.Dataset) and name.split("/")[0] in ("model", "optimizer"):
            h.update(name.encode()); h.update(obj[()].tobytes())
    f.visititems(add)
print(h.hexdigest())
PY
}

# The /model datasets of a checkpoint as one digest (bit-for-bit comparison;
# for a file that cannot be read, a line that equals no other).
model_digest() {
  /usr/bin/python3 - "$1" <<'PY' || echo "unreadable $1 $RANDOM$RANDOM"
import hashlib, sys, h5py
h = hashlib.sha256()
with h5py.File(sys.argv[1], "r") as f:
    for k in sorted(f["model"]):
        h.update(k.encode())
        h.update(f["model"][k][()].tobytes())
print(h.hexdigest())
PY
}

# Every float in every checkpoint of a directory is finite.
all_finite() {
  /usr/bin/python3 - "$@" <<'PY'
import sys, h5py, numpy as np
for path in sys.argv[1:]:
    with h5py.File(path, "r") as f:
        for k in f["model"]:
            if not np.all(np.isfinite(f["model"][k][()])):
                sys.exit(f"{path}: {k} is not finite")
PY
}

# kdp-train with `--model MODEL` and the rest of the arguments must be
# refused before training, saying TEXT; its output goes to LOG.
refused() {  # refused LOG TEXT MODEL [ARGS...]
  local log=$1 want=$2 model=$3
  shift 3
  if timeout 60 "$bin/kdp-train" --epochs 1 --batch-size 20 --model "$model" "$@" >"$log" 2>&1; then
    fail "--model '$model' $* was accepted"
  fi
  grep -qF -- "$want" "$log" || { cat "$log"; fail "--model '$model': no '$want'"; }
}
