#!/usr/bin/python3
"""Reads a kdp-train checkpoint with h5py as docs/checkpoint-format.md says a
PyTorch user would, and reproduces kdp-train's test accuracy with NumPy.

    read_checkpoint_h5py.py CHECKPOINT DATA.h5 EXPECTED_ACCURACY
"""
import sys

import h5py
import numpy as np


def main():
    ckpt, data, expected = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with h5py.File(ckpt, "r") as f:
        assert f.attrs["format"] == "kdp-checkpoint", f.attrs["format"]
        assert f.attrs["format_version"] == 1
        for a in ("epoch", "global_step", "batch_in_epoch", "world_size", "devices_per_rank",
                  "model_signature", "rng_states", "kdp_version", "created", "model_repr"):
            assert a in f.attrs, f"root attribute {a} missing"
        keys = sorted(f["model"].keys())
        assert keys == ["0.bias", "0.weight", "2.bias", "2.weight"], keys
        w0, b0 = f["model"]["0.weight"][()], f["model"]["0.bias"][()]
        w2, b2 = f["model"]["2.weight"][()], f["model"]["2.bias"][()]
        assert w0.dtype == np.float32 and w0.shape == (32, 784), (w0.dtype, w0.shape)
        assert b0.shape == (32,) and w2.shape == (10, 32) and b2.shape == (10,)
        opt = f["optimizer"]
        assert opt.attrs["type"] == "Adam"
        assert list(opt.attrs["parameters"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]
        assert opt["state"]["0.weight"]["exp_avg"].shape == (32, 784)
        assert opt["state"]["0.weight"].attrs["step"] == f.attrs["global_step"]
        t = f["training"].attrs
        scale, mean, std = t["data.scale"], t["data.mean"], t["data.std"]
    with h5py.File(data, "r") as d:
        images = d["test"]["images"][()].reshape(-1, 784).astype(np.float32)
        labels = d["test"]["labels"][()]
    x = (images * scale - mean) / std
    # PyTorch's nn.Linear: y = x W^T + b with W of shape [out, in].
    hidden = np.maximum(x @ w0.T + b0, 0.0)
    predictions = np.argmax(hidden @ w2.T + b2, axis=1)
    accuracy = float(np.mean(predictions == labels))
    # float64 here, float32 in kdp: a near tie may flip one prediction.
    tolerance = 1.0 / len(labels) + 1e-9
    if abs(accuracy - expected) > tolerance:
        sys.exit(f"NumPy accuracy {accuracy} differs from kdp-train's {expected}")
    print(f"ok: {ckpt} read with h5py; NumPy accuracy {accuracy} matches kdp-train's {expected}")


if __name__ == "__main__":
    main()
