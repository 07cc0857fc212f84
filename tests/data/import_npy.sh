#!/usr/bin/env bash
# kdp-data import-npy: numpy's arrays (.npy, .npz stored and compressed,
# little- and big-endian, every numeric type kdp takes) imported exactly, the
# same refusals as import-idx, and the result trained on by kdp-train.
#
#   import_npy.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
cd "$work" || fail "work directory"
/usr/bin/python3 - <<'PY' || fail "making the arrays"
import numpy as np
rng = np.random.default_rng(1)
np.save("x_u8.npy", rng.integers(0, 256, (50, 4, 4), dtype=np.uint8))
np.save("y_cls.npy", rng.integers(0, 3, 50).astype(np.int64))
np.savez_compressed("reg.npz", x=(rng.standard_normal((30, 6)) * 8).astype(">f2"),
                    y=rng.standard_normal((30, 2)).astype(np.float32))
np.savez("ints.npz", x=rng.integers(-2**30, 2**30, (30, 3), dtype=np.int32),
         y=rng.integers(0, 2, 30).astype(np.uint8))
np.save("fortran.npy", np.asfortranarray(rng.standard_normal((10, 3))))
np.save("x_i64.npy", np.zeros((10, 3), dtype=np.int64))
np.save("y_short.npy", np.zeros(49, dtype=np.int64))
bad = rng.standard_normal((30, 2)).astype(np.float32)
bad[17, 1] = np.nan
np.save("y_nan.npy", bad)
np.save("x_reg.npy", np.zeros((30, 6), dtype=np.float32))
np.save("objects.npy", np.array([{"a": 1}] * 10, dtype=object), allow_pickle=True)
PY
data=("$bin/kdp-data" import-npy)
"${data[@]}" --inputs x_u8.npy --targets y_cls.npy --out cls.h5 >/dev/null || fail "import uint8 and classes"
"${data[@]}" --inputs reg.npz:x --targets reg.npz:y --out reg.h5 >/dev/null || fail "import a compressed npz"
"${data[@]}" --inputs reg.npz:x --targets reg.npz:y --out reg.h5 --split test --add-split >/dev/null ||
  fail "add a test split"
"${data[@]}" --inputs ints.npz:x --targets ints.npz:y --out ints.h5 >/dev/null || fail "import a stored npz"
/usr/bin/python3 - <<'PY' || fail "the imported values"
import h5py, numpy as np
with h5py.File("cls.h5") as f:
    assert f["train/images"].dtype == np.uint8
    assert (f["train/images"][()] == np.load("x_u8.npy")).all()
    assert (f["train/labels"][()] == np.load("y_cls.npy")).all()
    assert f["train"].attrs["num_classes"] == np.load("y_cls.npy").max() + 1
a = np.load("reg.npz")
with h5py.File("reg.h5") as f:
    for split in ("train", "test"):
        assert f[split]["images"].dtype == np.float32
        assert (f[split]["images"][()] == a["x"].astype(np.float32)).all()
        assert (f[split]["labels"][()] == a["y"]).all()
        assert "num_classes" not in f[split].attrs
i = np.load("ints.npz")
with h5py.File("ints.h5") as f:
    assert f["train/images"].dtype == np.float64
    assert (f["train/images"][()] == i["x"]).all()
    assert (f["train/labels"][()] == i["y"]).all()
PY
echo "ok: uint8, big-endian float16 in a compressed npz, int32 in a stored npz: imported exactly"

refuse() {  # refuse NAME TEXT ARGS...: exit 1 with TEXT, and nothing written
  local name=$1 text=$2
  shift 2
  rm -f out.h5
  "${data[@]}" --out out.h5 "$@" >"$name.log" 2>&1 && fail "$name was imported"
  grep -qF -- "$text" "$name.log" || { cat "$name.log"; fail "$name: the message lacks '$text'"; }
  [[ ! -e out.h5 ]] || fail "$name: out.h5 was written"
}
refuse fortran "save it with np.ascontiguousarray" --inputs fortran.npy --targets y_cls.npy
refuse int64 "holds int64; inputs must be numbers" --inputs x_i64.npy --targets y_cls.npy
refuse short "has 50 samples but 'y_short.npy' has 49 targets" --inputs x_u8.npy --targets y_short.npy
refuse nan "value 1 of sample 17 in 'y_nan.npy' is nan" --inputs x_reg.npy --targets y_nan.npy
refuse range "out of range for 2 classes" --inputs x_u8.npy --targets y_cls.npy --classes 2
refuse member "has no array 'z' (it has: x, y)" --inputs reg.npz:z --targets reg.npz:y
refuse objects "holds numpy type '|O'" --inputs objects.npy --targets y_cls.npy
refuse npz "name the array in it" --inputs reg.npz --targets reg.npz:y
before=$(sha256sum cls.h5)
"${data[@]}" --inputs x_u8.npy --targets y_cls.npy --out cls.h5 >exists.log 2>&1 && fail "an existing output was replaced"
grep -q "already has a .train. split; --overwrite replaces it" exists.log || { cat exists.log; fail "existing output: no clear message"; }
[[ $(sha256sum cls.h5) == "$before" ]] || fail "the existing output changed"
echo "ok: Fortran order, int64 inputs, counts, NaN, labels out of range, missing members, objects and an existing output refused with one line each, nothing written"

timeout 60 "$bin/kdp-train" --data reg.h5 --model 6,8,2 --epochs 1 --batch-size 10 --progress lines \
  >train.log 2>&1 || { cat train.log; fail "kdp-train on the imported regression"; }
grep -q "val_r2=" train.log || fail "kdp-train did not report the regression"
echo "ok: kdp-train trained on the imported regression"
