#!/usr/bin/env bash
# kdp-train on a user's own HDF5 regression data: one set of samples at paths
# the user chose, float16 inputs, float targets, a tenth held out by seed.
#  - a linear target (y = x W + 1% noise) learned by a linear model: R² on the
#    held-out samples above 0.95 at 1 and 2 ranks (the noise alone would cost
#    about 1e-4 of it), the metrics file's R² column and its plot;
#  - a field-to-field model: targets [1, 6, 6] that are a 3x3 mean of the
#    input field, learned by one convolution, R² above 0.9;
#  - signals [2, 24] to one number (a linear functional) through conv1d,
#    R² above 0.9;
#  - volumes [1, 6, 6, 6]: a fixed 3x3x3 filter (no symmetry, so that a
#    kernel laid out in another order would not fit) learned by one conv3d,
#    R² above 0.9 in kdp and again in PyTorch from the checkpoint; the
#    volume's mean through conv3d, batchnorm and avgpool3d, R² above 0.9;
#  - per-channel normalisation of channels at scales 1000 and 0.01 with
#    standardised targets: R² above 0.95 and errors in the targets' units;
#  - --monitor val_r2 keeps the best checkpoint by R²;
#  - the samples cut into 3 files train as one dataset (a glob), and a file of
#    another shape among them is refused naming it.
#
#   kdp_train_regression.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
cd "$work" || fail "work directory"
/usr/bin/python3 - <<'PY' || fail "making the datasets"
import h5py, numpy as np
rng = np.random.default_rng(4)
x = rng.standard_normal((600, 8)).astype(np.float16)
w = rng.standard_normal((8, 2))
y = x.astype(np.float64) @ w + 0.01 * rng.standard_normal((600, 2))
with h5py.File("linear.h5", "w") as f:
    f["sim/inputs"] = x
    f["sim/outputs"] = y.astype(np.float32)
fields = rng.standard_normal((400, 1, 6, 6)).astype(np.float32)
padded = np.pad(fields, ((0, 0), (0, 0), (1, 1), (1, 1)))
smooth = sum(padded[:, :, i:i + 6, j:j + 6] for i in range(3) for j in range(3)) / 9.0
with h5py.File("fields.h5", "w") as f:
    f["u"] = fields
    f["v"] = smooth.astype(np.float32)
# Channels and targets far from zero and of different scales.
scaled = rng.standard_normal((500, 3, 4)) * np.array([1000.0, 0.01, 1.0])[None, :, None] + 500.0
big = 5000.0 + 1000.0 * (scaled[:, 0, :].mean(axis=1) - 500.0) / 1000.0 \
      + 1000.0 * (scaled[:, 1, :].mean(axis=1) - 500.0) / 0.01
with h5py.File("scaled.h5", "w") as f:
    f["x"] = scaled.astype(np.float32)
    f["y"] = (big + 10.0 * rng.standard_normal(500)).astype(np.float32)
signals = rng.standard_normal((500, 2, 24)).astype(np.float32)
with h5py.File("signals.h5", "w") as f:
    f["s"] = signals
    f["t"] = (signals[:, 0, :].mean(axis=1) - 2 * signals[:, 1, 3:6].mean(axis=1)).astype(np.float32)
volumes = rng.standard_normal((300, 1, 6, 6, 6)).astype(np.float32)
padded = np.pad(volumes, ((0, 0), (0, 0), (1, 1), (1, 1), (1, 1)))
kernel = rng.standard_normal((3, 3, 3)) / 5.0
box = sum(kernel[a, i, j] * padded[:, :, a:a + 6, i:i + 6, j:j + 6]
          for a in range(3) for i in range(3) for j in range(3))
with h5py.File("volumes.h5", "w") as f:
    f["u"] = volumes
    f["box"] = box.astype(np.float32)
    f["mean"] = volumes.mean(axis=(1, 2, 3, 4)).astype(np.float32)
PY
r2_of() { sed -n 's/.*val_r2=\([-0-9.e]*\).*/\1/p' "$1"; }
linear=("$bin/kdp-train" --data linear.h5 --inputs /sim/inputs --targets /sim/outputs --model 8,2
        --optimizer adam --lr 0.05 --epochs 8 --batch-size 40 --progress lines --seed 2)
timeout 120 "${linear[@]}" --metrics m.csv --checkpoint-dir ck --monitor val_r2 >one.log 2>&1 ||
  { cat one.log; fail "the linear regression at 1 rank"; }
r2=$(r2_of one.log)
awk -v r="$r2" 'BEGIN {exit !(r > 0.95)}' || { tail -3 one.log; fail "R² $r2 at 1 rank, not above 0.95"; }
echo "ok: a linear model on float16 inputs reached R² $r2 on the held-out tenth"
timeout 120 mpirun "${mpi_flags[@]}" -np 2 "${linear[@]}" >two.log 2>&1 ||
  { cat two.log; fail "the linear regression at 2 ranks"; }
r2_2=$(r2_of two.log)
awk -v r="$r2_2" 'BEGIN {exit !(r > 0.95)}' || fail "R² $r2_2 at 2 ranks, not above 0.95"
echo "ok: at 2 ranks R² $r2_2"
# Early stopping on the monitored metric.
timeout 120 "${linear[@]}" --epochs 200 --patience 2 --monitor val_loss >patience.log 2>&1 ||
  { cat patience.log; fail "the run with --patience"; }
grep -q "early stopping: val_loss did not improve for 2 epochs" patience.log ||
  { tail -3 patience.log; fail "--patience 2 did not stop the run"; }
grep -q "epochs=200 " patience.log && fail "--patience 2 trained all 200 epochs"
echo "ok: --patience 2 stopped the run $(sed -n 's/.* epochs=\([0-9]*\) .*/\1/p' patience.log) epochs in"
# The metrics file has the regression's columns, and the best checkpoint is
# the epoch of the highest R².
/usr/bin/python3 - <<'PY' || fail "the metrics file or the best checkpoint"
import csv, h5py
rows = [r for r in csv.DictReader(open("m.csv")) if r["type"] == "epoch"]
assert len(rows) == 8, len(rows)
r2 = [float(r["val_r2"]) for r in rows]
assert all(r["val_mae"] and r["val_mse"] for r in rows), rows[0]
best = max(range(8), key=lambda i: r2[i])
with h5py.File("ck/best.h5", "r") as f:
    assert int(f.attrs["epoch"]) == best + 1, (dict(f.attrs), r2)
PY
"$src/../scripts/plot_metrics" m.csv m.png >/dev/null || fail "plotting the regression's metrics"
[[ -s m.png ]] || fail "no plot"
echo "ok: the metrics file holds val_mse, val_mae and val_r2; best.h5 is the epoch of the best R²"

# The same samples cut into 3 files, one per "job", trained on as one dataset.
/usr/bin/python3 - <<'PY' || fail "cutting the data into files"
import h5py
with h5py.File("linear.h5") as f:
    x, y = f["sim/inputs"][()], f["sim/outputs"][()]
for k in range(3):
    with h5py.File(f"part-{k}.h5", "w") as g:
        g["sim/inputs"] = x[k * 200:(k + 1) * 200]
        g["sim/outputs"] = y[k * 200:(k + 1) * 200]
with h5py.File("part-odd.h5", "w") as g:
    g["sim/inputs"] = x[:10, :4]
    g["sim/outputs"] = y[:10]
PY
timeout 120 "${linear[@]}" --data 'part-[0-9].h5' >parts.log 2>&1 || { cat parts.log; fail "3 files as one"; }
r2p=$(r2_of parts.log)
awk -v r="$r2p" 'BEGIN {exit !(r > 0.95)}' || fail "3 files: R² $r2p, not above 0.95"
"${linear[@]}" --data 'part-*.h5' >odd.log 2>&1 && fail "a file of another shape was taken"
grep -q "part-odd.h5' holds float16 samples \[4\]" odd.log || { cat odd.log; fail "the odd file is not named"; }
echo "ok: 3 files as one dataset (R² $r2p); a file of another shape refused naming it"

timeout 120 "$bin/kdp-train" --data fields.h5 --inputs /u --targets /v --model 'conv(1,3,1,1)' \
  --optimizer adam --lr 0.05 --epochs 10 --batch-size 40 --progress lines >fields.log 2>&1 ||
  { cat fields.log; fail "the field-to-field regression"; }
r2f=$(r2_of fields.log)
awk -v r="$r2f" 'BEGIN {exit !(r > 0.9)}' || { tail -3 fields.log; fail "fields: R² $r2f, not above 0.9"; }
echo "ok: a convolution learned a 3x3 mean of [1, 6, 6] fields: R² $r2f"

# Per-channel normalisation and standardised targets: the errors come back in
# the targets' own units (a noise of 10 on targets of spread ~700: an MAE of
# about 8, where standardised units would give about 0.01).
timeout 120 "$bin/kdp-train" --data scaled.h5 --inputs /x --targets /y --model 12,1 --optimizer adam \
  --lr 0.02 --epochs 20 --batch-size 25 --progress lines --normalise channel --standardise-targets \
  --checkpoint-dir sck >scaled.log 2>&1 || { cat scaled.log; fail "the standardised regression"; }
r2c=$(r2_of scaled.log)
mae=$(sed -n 's/.*val_mae=\([-0-9.e+]*\).*/\1/p' scaled.log)
awk -v r="$r2c" -v m="$mae" 'BEGIN {exit !(r > 0.95 && m > 1 && m < 100)}' ||
  { tail -3 scaled.log; fail "standardised: R² $r2c, MAE $mae (want R² > 0.95, MAE in the targets' units)"; }
/usr/bin/python3 - <<'PY' || fail "the checkpoint does not record the normalisation"
import h5py, glob
with h5py.File(sorted(glob.glob("sck/ckpt-*.h5"))[-1]) as f:
    t = f["training"]
    # flat samples (an MLP): every one of the 12 features is a channel
    mean, std = t["data.channel_mean"][()], t["data.channel_std"][()]
    assert mean.shape == (12,) and abs(mean[0] - 500) < 200 and std[4] < 0.1, (mean, std)
    assert t["targets.std"].shape == (1,) and t["targets.std"][0] > 100, t["targets.std"][()]
PY
echo "ok: per-channel normalisation and standardised targets: R² $r2c, MAE $mae in the targets' units"

# Signals [2, 24] through 1-d convolutions to one number per sample.
timeout 120 "$bin/kdp-train" --data signals.h5 --inputs /s --targets /t \
  --model 'conv1d(8,3,1,1),relu,avgpool1d(2),flatten,linear(1)' --optimizer adam --lr 0.01 \
  --epochs 25 --batch-size 25 --progress lines >signals.log 2>&1 ||
  { cat signals.log; fail "the signal regression"; }
r2s=$(r2_of signals.log)
awk -v r="$r2s" 'BEGIN {exit !(r > 0.9)}' || { tail -3 signals.log; fail "signals: R² $r2s, not above 0.9"; }
echo "ok: 1-d convolutions learned a linear functional of [2, 24] signals: R² $r2s"

# Volumes [1, 6, 6, 6]: a 3x3x3 filter by one 3-d convolution (field to
# field), its checkpoint run by PyTorch's Conv3d; and the volume's mean
# through conv3d, batchnorm and avgpool3d.
timeout 120 "$bin/kdp-train" --data volumes.h5 --inputs /u --targets /box --model 'conv3d(1,3,1,1)' \
  --optimizer adam --lr 0.05 --epochs 10 --batch-size 30 --progress lines --checkpoint-dir vck \
  >box.log 2>&1 || { cat box.log; fail "the volume-to-volume regression"; }
r2b=$(r2_of box.log)
awk -v r="$r2b" 'BEGIN {exit !(r > 0.9)}' || { tail -3 box.log; fail "volumes: R² $r2b, not above 0.9"; }
/usr/bin/python3 - <<'PY' || fail "PyTorch's Conv3d with kdp's checkpoint"
import glob, h5py, torch
with h5py.File(sorted(glob.glob("vck/ckpt-*.h5"))[-1]) as f:
    w, b = torch.tensor(f["model/0.weight"][()]), torch.tensor(f["model/0.bias"][()])
    mean, std = float(f["training"].attrs["data.mean"]), float(f["training"].attrs["data.std"])
with h5py.File("volumes.h5") as f:
    u, box = torch.tensor(f["u"][()]), torch.tensor(f["box"][()])
assert tuple(w.shape) == (1, 1, 3, 3, 3), w.shape
layer = torch.nn.Conv3d(1, 1, 3, padding=1)
layer.load_state_dict({"weight": w, "bias": b})
with torch.no_grad():
    pred = layer((u - mean) / std)
r2 = 1 - float(((pred - box) ** 2).sum() / ((box - box.mean()) ** 2).sum())
assert r2 > 0.9, r2
print(f"PyTorch's Conv3d with the checkpoint's weights: R² {r2:.4f}")
PY
timeout 120 "$bin/kdp-train" --data volumes.h5 --inputs /u --targets /mean \
  --model 'conv3d(2,3,1,1),batchnorm,avgpool3d(2),flatten,linear(1)' --optimizer adam --lr 0.01 \
  --epochs 15 --standardise-targets --batch-size 30 --progress lines >vmean.log 2>&1 ||
  { cat vmean.log; fail "the volume-to-number regression"; }
r2v=$(r2_of vmean.log)
awk -v r="$r2v" 'BEGIN {exit !(r > 0.9)}' || { tail -3 vmean.log; fail "volume means: R² $r2v, not above 0.9"; }
echo "ok: 3-d convolutions learned a 3x3x3 mean (R² $r2b) and a volume's mean (R² $r2v)"
