"""Runs a kdp probe (tests/ops/probe_writer.hpp) into a work directory and
reads back the arrays it wrote, as torch tensors by name."""
import os
import subprocess


def run_probe(probe, work, dtype):
    import numpy as np
    import torch
    os.makedirs(work, exist_ok=True)
    subprocess.run([probe, work], check=True)
    arrays = {}
    with open(os.path.join(work, "manifest.txt")) as f:
        for line in f:
            name, *dims = line.split()
            data = np.fromfile(os.path.join(work, name + ".f32"), dtype=np.float32)
            arrays[name] = torch.from_numpy(data.reshape([int(d) for d in dims])).to(dtype)
    return arrays
