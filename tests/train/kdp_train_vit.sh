#!/usr/bin/env bash
# kdp-train with the reference vision transformer, vit(patch,dim,depth,heads,
# mlp[,dropout]), on a user's own images: [1, 8, 8] of three stripe patterns
# (horizontal, vertical, checker) under noise.
#  - it learns them: test accuracy at least 0.9 after 4 epochs (chance: 1/3);
#  - PyTorch rebuilds the model from kdp/nn/transformer.hpp's description
#    alone, loads the checkpoint's /model by name and reproduces kdp's test
#    loss to 1e-5 relative and its accuracy, with the normalisation the
#    checkpoint records;
#  - reproducible mode with dropout gives the same weights, bit for bit, at 1
#    and 2 ranks;
#  - what does not fit is refused before training, naming the layer and the
#    shape: patches that do not tile the images, heads that do not divide dim,
#    vit inside a longer list, targets that are not classes.
#
#   kdp_train_vit.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
cd "$work" || fail "work directory"
/usr/bin/python3 - <<'PY' || fail "making the datasets"
import h5py, numpy as np
rng = np.random.default_rng(5)
i, j = np.mgrid[0:8, 0:8]
patterns = [i % 2, j % 2, (i + j) % 2]
def make(n, size=8):
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 0.3, (n, 1, size, size)).astype(np.float32)
    for k, c in enumerate(y):
        x[k, 0] += patterns[int(c)][:size, :size]
    return x, y.astype(np.uint8)
for name, size in (("stripes.h5", 8), ("small.h5", 6)):
    with h5py.File(name, "w") as f:
        for split, n in (("train", 300), ("test", 60)):
            x, y = make(n, size)
            f[f"{split}/images"], f[f"{split}/labels"] = x, y
with h5py.File("floats.h5", "w") as f:
    x, _ = make(100)
    f["x"], f["y"] = x, rng.normal(size=(100,)).astype(np.float32)
PY
common=(--data stripes.h5 --epochs 4 --batch-size 20 --optimizer adam --lr 3e-3 --progress lines)
timeout 120 "$bin/kdp-train" "${common[@]}" --model 'vit(4,16,1,2,32,0)' --checkpoint-dir ck \
  --metrics m.csv >train.log 2>&1 || { cat train.log; fail "training vit"; }
acc=$(sed -n 's/.*test_accuracy=\([0-9.]*\).*/\1/p' train.log)
awk -v a="$acc" 'BEGIN {exit !(a >= 0.9)}' || { tail -3 train.log; fail "test accuracy $acc, not 0.9"; }
echo "ok: vit(4,16,1,2,32,0) learned the stripes: test accuracy $acc"

PYTHONPATH="$src/ops" /usr/bin/python3 - <<'PY' || fail "PyTorch's rebuilt ViT with kdp's checkpoint"
import csv, glob, h5py, torch
from torch_reference_models import ViT  # as kdp/nn/transformer.hpp describes it

last = sorted(glob.glob("ck/ckpt-*.h5"))[-1]
with h5py.File(last) as f:
    state = {k: torch.tensor(v[()]) for k, v in f["model"].items()}
    mean, std = float(f["training"].attrs["data.mean"]), float(f["training"].attrs["data.std"])
with h5py.File("stripes.h5") as f:
    x, y = torch.tensor(f["test/images"][()]), torch.tensor(f["test/labels"][()]).long()
model = ViT(1, 8, 4, 16, 1, 2, 32, 3, 0.0)
model.load_state_dict(state, strict=True)
model.eval()
with torch.no_grad():
    logits = model((x - mean) / std)
loss = torch.nn.functional.cross_entropy(logits, y).item()
acc = (logits.argmax(1) == y).float().mean().item()
rows = [r for r in csv.DictReader(open("m.csv")) if r["type"] == "epoch"]
kdp_loss, kdp_acc = float(rows[-1]["val_loss"]), float(rows[-1]["val_accuracy"])
print(f"PyTorch {torch.__version__}: test loss {loss:.7g} (kdp {kdp_loss:.7g}), accuracy {acc:.4f} (kdp {kdp_acc:.4f})")
# The metrics file keeps 6 significant digits: a rounding of at most 5e-6.
assert abs(loss - kdp_loss) <= 1e-5 * abs(kdp_loss) + 5e-6 * abs(kdp_loss), (loss, kdp_loss)
assert abs(acc - kdp_acc) < 1e-6, (acc, kdp_acc)
PY
echo "ok: PyTorch reproduces the test loss from the checkpoint"

# Reproducible mode with dropout on the tokens, the attention and the
# feed-forward: 1 and 2 ranks agree bit for bit.
repro=("${common[@]}" --model 'vit(4,16,1,2,32,0.1)' --epochs 2 --reproducible)
timeout 120 "$bin/kdp-train" "${repro[@]}" --checkpoint-dir r1 >r1.log 2>&1 || { cat r1.log; fail "reproducible, 1 rank"; }
timeout 120 mpirun "${mpi_flags[@]}" -np 2 "$bin/kdp-train" "${repro[@]}" --checkpoint-dir r2 >r2.log 2>&1 ||
  { cat r2.log; fail "reproducible, 2 ranks"; }
grep -q "reproducible mode on" r2.log || { head -3 r2.log; fail "reproducible mode did not run"; }
one=$(model_digest r1/ckpt-000000030.h5) two=$(model_digest r2/ckpt-000000030.h5)
[[ $one == "$two" ]] || fail "reproducible mode: 1 and 2 ranks give different weights"
echo "ok: reproducible mode with dropout: the same weights at 1 and 2 ranks"

# Refused before training, naming what does not fit.
refused tile.log "layer 0 'vit(4,16,1,2,32)' does not fit its input [1, 6, 6]: patches of 4 do not tile 6 x 6 images" \
  'vit(4,16,1,2,32)' --data small.h5
refused heads.log "3 heads do not divide dim 16" 'vit(4,16,1,3,32)' --data stripes.h5
refused alone.log "is a whole model" 'vit(4,16,1,2,32),linear(3)' --data stripes.h5
refused regression.log "ends with a head to classes" 'vit(4,16,1,2,32)' --data floats.h5 --inputs /x --targets /y
echo "ok: vit that does not fit is refused, naming the layer and the shape"
