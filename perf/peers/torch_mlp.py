#!/usr/bin/python3
"""PyTorch's side of the reference models: one full training step (forward,
cross-entropy, backward, SGD with momentum) per iteration of the same three
MLPs kdp_bench_models times, at the same per-process batch, with the same
initialisation and data shapes.

    torch_mlp.py --layout 1x1|1xN|2x1 [--models T,M,L] [--seconds S] [--quick]

Layouts are processes x threads: one process on one thread, one process on
every core, or two DistributedDataParallel processes (gloo) of one thread each.
Prints one JSON object: {"layout": ..., "threads": ..., "models": {"T":
{"samples_per_s": ..., "step_us": ...}, ...}} (samples over all processes).
"""
import argparse
import json
import os
import sys
import time

MODELS = {"T": ([10, 100, 10], 64), "M": ([784, 256, 256, 10], 256), "L": ([784, 1024, 1024, 10], 256)}


def mlp(sizes):
    import torch.nn as nn
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def time_model(torch, name, rank, world, seconds, quick):
    sizes, batch = MODELS[name]
    torch.manual_seed(0)
    model = mlp(sizes)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, sizes[0])
    y = torch.arange(batch) % sizes[-1]

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    # Calibrate to about `seconds` of steps, then time them. Every rank runs
    # the same number of steps (DDP's collectives need it): a fixed count to
    # calibrate, then rank 0's choice.
    calib = 5
    start = time.perf_counter()
    for _ in range(calib):
        step()
    per_step = (time.perf_counter() - start) / calib
    steps = 5 if quick else max(10, int(seconds / per_step))
    if world > 1:
        import torch.distributed as dist
        t = torch.tensor([steps])
        dist.broadcast(t, 0)
        steps = int(t.item())
        dist.barrier()
    best = None
    for _ in range(1 if quick else 3):  # best of three rounds: the least disturbed
        start = time.perf_counter()
        for _ in range(steps):
            step()
        elapsed = time.perf_counter() - start
        if world > 1:
            import torch.distributed as dist
            t = torch.tensor([elapsed], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            elapsed = float(t.item())
        best = elapsed if best is None else min(best, elapsed)
    step_s = best / steps
    return {"samples_per_s": batch * world / step_s, "step_us": step_s * 1e6, "steps": steps}


def worker(rank, world, args, queue):
    import torch
    torch.set_num_threads(args.threads)
    if world > 1:
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    out = {m: time_model(torch, m, rank, world, args.seconds, args.quick) for m in args.models}
    if world > 1:
        import torch.distributed as dist
        dist.destroy_process_group()
    if rank == 0:
        queue.put(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layout", default="1x1", choices=["1x1", "1xN", "2x1"])
    ap.add_argument("--models", default="T,M,L")
    ap.add_argument("--seconds", type=float, default=1.0, help="timed seconds per model and round")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    args.models = [m for m in args.models.split(",") if m]
    cores = len(os.sched_getaffinity(0))
    processes = 2 if args.layout == "2x1" else 1
    args.threads = cores if args.layout == "1xN" else 1
    # The BLAS under PyTorch keeps a thread pool of its own, sized by these
    # variables when it loads (before torch is imported): without them a
    # "one thread" process would multiply on every core.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    try:
        import torch  # noqa: F401
    except ImportError:
        print(json.dumps({"layout": args.layout, "error": "PyTorch is not installed (python3-torch)"}))
        return 3
    import torch.multiprocessing as mp
    if processes == 1:
        queue = mp.SimpleQueue()
        worker(0, 1, args, queue)
    else:
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        os.environ["MASTER_PORT"] = str(29500 + os.getpid() % 1000)
        procs = [ctx.Process(target=worker, args=(r, processes, args, queue)) for r in range(processes)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            print(json.dumps({"layout": args.layout, "error": "a DDP process failed"}))
            return 1
    import torch
    print(json.dumps({"layout": args.layout, "processes": processes, "threads": args.threads,
                      "torch": torch.__version__, "models": queue.get()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
