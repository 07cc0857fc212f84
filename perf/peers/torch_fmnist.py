#!/usr/bin/python3
"""PyTorch's side of the time-to-accuracy comparison, with the same data
(Fashion-MNIST from Debian's dataset-fashion-mnist), normalisation, model,
batch, optimizer, learning rate and epochs as kdp-train; after each epoch the
test accuracy.

  --model mlp  the 784-256-256-10 MLP kdp-train trains by default, with Adam
  --model cnn  the pytorch/examples MNIST CNN with its recipe: Adadelta, the
               learning rate times --gamma after every epoch
  --model vit  the reference vit(4,64,6,4,128) (torch_cnn.py's ViT) with
               kdp-train's demo recipe: AdamW without weight decay and a
               cosine schedule over --epochs

    torch_fmnist.py [--model mlp|cnn|vit] [--epochs 10] [--batch-size 128] [--lr 1e-3]
                    [--gamma 0.7] [--target 0.88] [--stop-at-target] [--processes P]
                    [--threads N] [--dir DIR]

With --processes P > 1 the processes train with DistributedDataParallel over
gloo, each on its share of every global batch (--batch-size / P), one thread
each by default.

Training time counts the epochs' training only (not the evaluations), as
kdp-train's epoch lines do. With --stop-at-target the run ends after the epoch
that reaches the target (for wall-time comparisons from launch). Prints one
JSON object: per epoch the cumulative training seconds and the test accuracy,
and seconds_to_target (null when the target was not reached).
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

from torch_cnn import examples, vit


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return shape, data[4 + 4 * dims:]


def load_data(directory):
    """Training and test images (flat, float32, normalised as kdp-train does)
    and labels (int64), as torch tensors."""
    import numpy as np
    import torch

    def load(prefix):
        (n, rows, cols), images = read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"))
        _, labels = read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"))
        x = np.frombuffer(images, dtype=np.uint8).reshape(n, rows * cols).astype(np.float32) / 255.0
        return x, np.frombuffer(labels, dtype=np.uint8).astype(np.int64)

    x_train, y_train = load("train")
    x_test, y_test = load("t10k")
    # kdp-train's normalisation: mean and deviation of the scaled pixels of 10000
    # evenly spaced training samples.
    sample = x_train[np.arange(10000) * (len(x_train) // 10000)]
    mean, std = float(sample.mean(dtype=np.float64)), float(sample.std(dtype=np.float64))
    return (torch.from_numpy((x_train - mean) / std), torch.from_numpy(y_train),
            torch.from_numpy((x_test - mean) / std), torch.from_numpy(y_test))


def train(rank, args, queue):
    """One process's training (DistributedDataParallel over gloo with several);
    rank 0 evaluates the whole test set after each epoch and puts the report
    on `queue`."""
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    world = args.processes
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=world)
    x_train, y_train, x_test, y_test = load_data(args.dir)
    nn = torch.nn
    scheduler = None
    if args.model == "cnn":
        x_train, x_test = x_train.reshape(-1, 1, 28, 28), x_test.reshape(-1, 1, 28, 28)
        model = examples(nn)
        opt = torch.optim.Adadelta(model.parameters(), lr=args.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=args.gamma)
    elif args.model == "vit":
        # kdp-train's vit(4,64,6,4,128) recipe: AdamW without weight decay (its
        # --weight-decay default), a cosine schedule over the epochs.
        x_train, x_test = x_train.reshape(-1, 1, 28, 28), x_test.reshape(-1, 1, 28, 28)
        model = vit(nn)
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    else:
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                              nn.Linear(256, 10))
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss()
    # Every process draws the same permutation and trains on its share of
    # each global batch, as DistributedSampler does.
    shuffle = torch.Generator().manual_seed(args.seed)
    per_rank = args.batch_size // world
    epochs, trained, reached = [], 0.0, None
    for epoch in range(args.epochs):
        net.train()
        order = torch.randperm(len(x_train), generator=shuffle)[rank::world]
        start = time.perf_counter()
        for b in range(0, len(order), per_rank):
            idx = order[b:b + per_rank]
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                loss = loss_fn(net(x_train[idx]), y_train[idx])
            loss.backward()
            opt.step()
        trained += time.perf_counter() - start
        if scheduler is not None:
            scheduler.step()
        stop = torch.zeros(1)
        if rank == 0:
            model.eval()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                 enabled=args.precision == "bf16"):
                predicted = torch.cat([model(x_test[b:b + 1000]).argmax(1)
                                       for b in range(0, len(x_test), 1000)])
                accuracy = float((predicted == y_test).float().mean())
            epochs.append({"epoch": epoch + 1, "train_s": trained, "test_accuracy": accuracy})
            if reached is None and accuracy >= args.target:
                reached = trained
                stop[0] = 1.0 if args.stop_at_target else 0.0
        if world > 1:
            torch.distributed.broadcast(stop, 0)
        if stop[0] > 0:
            break
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        queue.put({"model": args.model, "processes": world, "threads": args.threads,
                   "batch_size": args.batch_size, "lr": args.lr, "target": args.target,
                   "precision": args.precision,
                   "epochs": epochs, "seconds_to_target": reached, "torch": torch.__version__})


def parse_run_args(ap):
    """Adds the options every peer takes (processes, threads, seed, data
    directory), parses, and sizes the BLAS thread pools: before torch loads."""
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="per process (default: cores / processes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
    ap.add_argument("--dir", default=os.environ.get("KDP_FASHION_MNIST_DIR",
                                                    "/usr/share/datasets/fashion-mnist"))
    args = ap.parse_args()
    if args.threads is None:
        args.threads = max(1, len(os.sched_getaffinity(0)) // args.processes)
    # The BLAS under PyTorch sizes its own thread pool from these when it loads.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "vit"])
    ap.add_argument("--gamma", type=float, default=0.7)
    ap.add_argument("--stop-at-target", action="store_true")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128, help="the global batch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--target", type=float, default=0.88)
    args = parse_run_args(ap)
    try:
        import numpy  # noqa: F401
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print(json.dumps({"error": "PyTorch is not installed (python3-torch)"}))
        return 3
    if args.processes == 1:
        queue = mp.SimpleQueue()
        train(0, args, queue)
    else:
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        procs = [ctx.Process(target=train, args=(r, args, queue)) for r in range(args.processes)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            print(json.dumps({"error": "a DDP process failed"}))
            return 1
    print(json.dumps(queue.get()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
