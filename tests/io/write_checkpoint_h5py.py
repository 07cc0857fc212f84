#!/usr/bin/python3
"""Writes a checkpoint of a small CNN with h5py alone, as docs/checkpoint-format.md
tells an outside writer to, for Checkpoint.AFileWrittenByPythonLoads to load.

    write_checkpoint_h5py.py OUT.h5

The model is kdp's "conv(4,3),batchnorm,relu,maxpool(2),flatten,linear(10)" on
[1, 28, 28] images (PyTorch: Sequential(Conv2d(1, 4, 3), BatchNorm2d(4), ReLU(),
MaxPool2d(2), Flatten(), Linear(676, 10))). Entry k of the state dict holds
sin(1 + 0.1 i + k) at its index i; num_batches_tracked is 7. The float entries are
stored contiguous, chunked and compressed, or as float64, in turn.
"""
import sys

import h5py
import numpy as np

STATE = [("0.weight", (4, 1, 3, 3)), ("0.bias", (4,)), ("1.weight", (4,)), ("1.bias", (4,)),
         ("1.running_mean", (4,)), ("1.running_var", (4,)), ("1.num_batches_tracked", ()),
         ("5.weight", (10, 676)), ("5.bias", (10,))]


def model_signature(state):
    h = 1469598103934665603
    for key, value in state.items():
        for byte in f"{key} [{', '.join(map(str, value.shape))}]\n".encode():
            h = ((h ^ byte) * 1099511628211) % 2**64
    return f"fnv1a64:{h:016x}"


def main():
    state = {}
    for k, (key, shape) in enumerate(STATE):
        if key.endswith("num_batches_tracked"):
            state[key] = np.array(7, dtype=np.int64)
            continue
        n = int(np.prod(shape)) if shape else 1
        values = np.sin(1.0 + 0.1 * np.arange(n) + k).astype(np.float32)
        if key.endswith("running_var"):
            values = np.abs(values) + 0.5  # a variance
        state[key] = values.reshape(shape)
    with h5py.File(sys.argv[1], "w") as f:
        attrs = {"format": "kdp-checkpoint", "kdp_version": "outside", "created": "2026-12-01",
                 "model_signature": model_signature(state)}
        for name, text in attrs.items():
            f.attrs[name] = text
        for name in ("format_version", "world_size", "devices_per_rank"):
            f.attrs[name] = np.int64(1)
        for name in ("epoch", "global_step", "batch_in_epoch", "sampler_seed"):
            f.attrs[name] = np.int64(0)
        f.attrs["rng_states"] = np.array([], dtype=h5py.string_dtype())
        model = f.create_group("model")
        for k, (key, value) in enumerate(state.items()):
            # Outside writers store floats as they like: contiguous float32
            # (h5py's default), chunked and compressed, or float64.
            if value.dtype == np.float32 and k % 3 == 1:
                model.create_dataset(key, data=value, chunks=True, compression="gzip")
            elif value.dtype == np.float32 and k % 3 == 2:
                model.create_dataset(key, data=value.astype(np.float64))
            else:
                model.create_dataset(key, data=value)
        opt = f.create_group("optimizer")
        opt.attrs["type"] = "SGD"
        for name, value in (("lr", 0.01), ("momentum", 0.9), ("dampening", 0.0),
                            ("weight_decay", 0.0), ("nesterov", 0.0)):
            opt.attrs[name] = np.float64(value)
        opt.attrs["parameters"] = np.array([k for k, _ in STATE if "running" not in k
                                            and "tracked" not in k], dtype=h5py.string_dtype())
        opt.create_group("state")
        f.create_group("training")
    print(f"wrote {sys.argv[1]}")


if __name__ == "__main__":
    main()
