#!/usr/bin/python3
"""PyTorch's side of the reference CNNs, the ones kdp_bench_models times (the
same layers, batch 64 of [1, 28, 28] images):

  H  Horovod's examples/pytorch/pytorch_mnist.py Net
  E  pytorch/examples mnist/main.py Net
  B  conv-BN-ReLU 1->32, 32->32, pool, 32->64, pool, global average pool, fc 64->10

    torch_cnn.py --layout 1x1|1xN|2x1 [--models H,E,B] [--seconds S] [--quick]

Layouts and output: see torch_steps.py.
"""
import sys

from torch_steps import main


def horovod(nn):
    return nn.Sequential(nn.Conv2d(1, 10, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(10, 20, 5),
                         nn.Dropout2d(0.5), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(),
                         nn.Linear(320, 50), nn.ReLU(), nn.Dropout(0.5), nn.Linear(50, 10))


def examples(nn):
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128),
                         nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))


def batch_norm(nn):
    def block(c_in, c_out):
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
    return nn.Sequential(*block(1, 32), *block(32, 32), nn.MaxPool2d(2), *block(32, 64),
                         nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


MODELS = {"H": (horovod, (1, 28, 28), 10, 64), "E": (examples, (1, 28, 28), 10, 64),
          "B": (batch_norm, (1, 28, 28), 10, 64)}

if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], MODELS))
