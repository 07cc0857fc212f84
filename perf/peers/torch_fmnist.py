#!/usr/bin/python3
"""PyTorch's side of the time-to-accuracy comparison: the 784-256-256-10 MLP
kdp-train trains by default, with the same data (Fashion-MNIST from Debian's
dataset-fashion-mnist), normalisation, batch, optimizer, learning rate and
epochs; after each epoch the test accuracy. Training time counts the epochs'
training only (not the evaluations), as kdp-train's epoch lines do.

    torch_fmnist.py [--epochs 10] [--batch-size 128] [--lr 1e-3] [--target 0.88]
                    [--threads N] [--dir DIR]

Prints one JSON object: per epoch the cumulative training seconds and the test
accuracy, and seconds_to_target (null when the target was not reached).
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return shape, data[4 + 4 * dims:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=os.environ.get("KDP_FASHION_MNIST_DIR",
                                                    "/usr/share/datasets/fashion-mnist"))
    args = ap.parse_args()
    # The BLAS under PyTorch sizes its own thread pool from these when it loads.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    try:
        import numpy as np
        import torch
    except ImportError:
        print(json.dumps({"error": "PyTorch is not installed (python3-torch)"}))
        return 3
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    def load(prefix):
        (n, rows, cols), images = read_idx(os.path.join(args.dir, f"{prefix}-images-idx3-ubyte.gz"))
        _, labels = read_idx(os.path.join(args.dir, f"{prefix}-labels-idx1-ubyte.gz"))
        x = np.frombuffer(images, dtype=np.uint8).reshape(n, rows * cols).astype(np.float32) / 255.0
        return x, np.frombuffer(labels, dtype=np.uint8).astype(np.int64)

    x_train, y_train = load("train")
    x_test, y_test = load("t10k")
    # kdp-train's normalisation: mean and deviation of the scaled pixels of 10000
    # evenly spaced training samples.
    sample = x_train[np.arange(10000) * (len(x_train) // 10000)]
    mean, std = float(sample.mean(dtype=np.float64)), float(sample.std(dtype=np.float64))
    x_train = torch.from_numpy((x_train - mean) / std)
    x_test = torch.from_numpy((x_test - mean) / std)
    y_train, y_test = torch.from_numpy(y_train), torch.from_numpy(y_test)

    nn = torch.nn
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    epochs, trained, reached = [], 0.0, None
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x_train))
        start = time.perf_counter()
        for b in range(0, len(order), args.batch_size):
            idx = order[b:b + args.batch_size]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x_train[idx]), y_train[idx]).backward()
            opt.step()
        trained += time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            accuracy = float((model(x_test).argmax(1) == y_test).float().mean())
        epochs.append({"epoch": epoch + 1, "train_s": trained, "test_accuracy": accuracy})
        if reached is None and accuracy >= args.target:
            reached = trained
    print(json.dumps({"threads": args.threads, "batch_size": args.batch_size, "lr": args.lr,
                      "target": args.target, "epochs": epochs, "seconds_to_target": reached,
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
