#!/usr/bin/python3
"""PyTorch's side of the reference MLPs: one full training step per iteration
of the same three MLPs kdp_bench_models times, at the same per-process batch,
with the same initialisation and data shapes.

    torch_mlp.py --layout 1x1|1xN|2x1 [--models T,M,L] [--seconds S] [--quick]

Layouts and output: see torch_steps.py.
"""
import functools
import sys

from torch_steps import main

SIZES = {"T": ([10, 100, 10], 64), "M": ([784, 256, 256, 10], 256), "L": ([784, 1024, 1024, 10], 256)}


def mlp(sizes, nn):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# (A partial, not a closure: the 2x1 layout's processes receive it pickled.)
MODELS = {name: (functools.partial(mlp, sizes), (sizes[0],), sizes[-1], batch)
          for name, (sizes, batch) in SIZES.items()}

if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], MODELS))
