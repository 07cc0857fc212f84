#!/usr/bin/python3
"""Reads a kdp-train checkpoint with h5py as docs/checkpoint-format.md says a
PyTorch user would, and reproduces kdp-train's test accuracy with NumPy: the
784-32-10 MLP of the CLI test, or a CNN given as a layer list (convolutions,
BatchNorm in evaluation mode, pooling, linear layers, as PyTorch computes them).

    read_checkpoint_h5py.py CHECKPOINT DATA.h5 EXPECTED_ACCURACY
"""
import re
import sys

import h5py
import numpy as np


def conv2d(x, w, b, stride, padding):
    """PyTorch's Conv2d on [N, C, H, W] (groups 1, dilation 1)."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]  # [N, C, OH, OW, kh, kw]
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True) + b[None, :, None, None]


def pool(x, k, reduce):
    n, c, h, w = x.shape
    x = x[:, :, : h // k * k, : w // k * k].reshape(n, c, h // k, k, w // k, k)
    return reduce(x, axis=(3, 5))


def run_layer_list(layers, state, x):
    """The model of a kdp layer list in evaluation mode."""
    for i, item in enumerate(re.findall(r"[a-z_0-9]+(?:\([^)]*\))?", layers)):
        kind = item.split("(")[0]
        args = [float(a) for a in item[len(kind) + 1:-1].split(",")] if "(" in item else []
        p = lambda name: state[f"{i}.{name}"]
        if kind == "conv":
            stride = int(args[2]) if len(args) > 2 else 1
            padding = int(args[3]) if len(args) > 3 else 0
            x = conv2d(x, p("weight"), p("bias"), stride, padding)
        elif kind == "batchnorm":
            assert state[f"{i}.num_batches_tracked"].dtype == np.int64
            shape = (1, -1) + (1,) * (x.ndim - 2)
            x = (x - p("running_mean").reshape(shape)) / np.sqrt(
                p("running_var").reshape(shape) + 1e-5) * p("weight").reshape(shape) + \
                p("bias").reshape(shape)
        elif kind == "relu":
            x = np.maximum(x, 0.0)
        elif kind == "maxpool":
            x = pool(x, int(args[0]), np.max)
        elif kind == "avgpool":
            x = pool(x, int(args[0]), np.mean)
        elif kind == "gap":
            x = x.mean(axis=(2, 3), keepdims=True)
        elif kind == "flatten":
            x = x.reshape(x.shape[0], -1)
        elif kind == "linear":
            x = x @ p("weight").T + p("bias")
        elif kind not in ("dropout", "dropout2d"):
            sys.exit(f"read_checkpoint_h5py.py: no NumPy for layer '{item}'")
    return x


def main():
    ckpt, data, expected = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with h5py.File(ckpt, "r") as f:
        model = f["run"].attrs["model"]
        model = model.decode() if isinstance(model, bytes) else model
        if model[0].isalpha():
            state = {k: f["model"][k][()] for k in f["model"]}
            t = f["training"].attrs
            scale, mean, std = t["data.scale"], t["data.mean"], t["data.std"]
            with h5py.File(data, "r") as d:
                images = d["test"]["images"][()].astype(np.float32)
                labels = d["test"]["labels"][()]
            x = ((images * scale - mean) / std).reshape(-1, 1, 28, 28).astype(np.float64)
            accuracy = float(np.mean(np.argmax(run_layer_list(model, state, x), axis=1) == labels))
            check(ckpt, accuracy, expected, len(labels))
            return
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
    check(ckpt, accuracy, expected, len(labels))


def check(ckpt, accuracy, expected, count):
    # float64 here, float32 in kdp: a near tie may flip one prediction.
    tolerance = 1.0 / count + 1e-9
    if abs(accuracy - expected) > tolerance:
        sys.exit(f"NumPy accuracy {accuracy} differs from kdp-train's {expected}")
    print(f"ok: {ckpt} read with h5py; NumPy accuracy {accuracy} matches kdp-train's {expected}")


if __name__ == "__main__":
    main()
