"""The timing loop and the layouts the PyTorch peers share (torch_mlp.py,
torch_cnn.py): full training steps (forward, cross-entropy, backward, SGD
with momentum; with --precision bf16, forward and loss under
torch.autocast("cpu", torch.bfloat16)) of each model at one process on one thread (1x1), one process
on every core (1xN), or two DistributedDataParallel processes (gloo) of one
thread each (2x1). Prints one JSON object: {"layout": ..., "threads": ...,
"torch": version, "models": {name: {"samples_per_s": ..., "step_us": ...}}}
(samples over all processes).
"""
import argparse
import json
import math
import os
import time


def time_model(torch, spec, rank, world, seconds, quick, bf16):
    build, input_shape, classes, batch = spec[:4]
    torch.manual_seed(0)
    model = build(torch.nn)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    if len(spec) > 4:  # its own data: sequences of tokens and their next tokens
        x, y = spec[4](torch, batch)
    else:
        x = torch.randn(batch, *input_shape)
        y = torch.arange(batch) % classes

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            loss = loss_fn(out.reshape(-1, out.shape[-1]) if out.dim() == 3 else out, y)
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    # Calibrate to about `seconds` of steps, then time them (at least three
    # steps a round: a model whose step takes longer than `seconds` is timed
    # over three). Every rank runs the same number of steps (DDP's
    # collectives need it): a fixed count to calibrate, then rank 0's choice.
    calib = 2  # these steps warm the model further; the rounds below take the best
    start = time.perf_counter()
    for _ in range(calib):
        step()
    per_step = (time.perf_counter() - start) / calib
    steps = 5 if quick else max(3, math.ceil(seconds / per_step))
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


def worker(rank, world, args, queue, models):
    import torch
    torch.set_num_threads(args.threads)
    if world > 1:
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    out = {m: time_model(torch, models[m], rank, world, args.seconds, args.quick,
                         args.precision == "bf16")
           for m in args.models}
    if world > 1:
        import torch.distributed as dist
        dist.destroy_process_group()
    if rank == 0:
        queue.put(out)


def main(description, models):
    """Times `models` ({name: (build(nn), input shape, classes, batch[, data(torch,
    batch) -> (x, y)])}) at the
    layout the command line asks for and prints the JSON line."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--layout", default="1x1", choices=["1x1", "1xN", "2x1"])
    ap.add_argument("--models", default=",".join(models))
    ap.add_argument("--seconds", type=float, default=0.5, help="timed seconds per model and round")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
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
        print(json.dumps({"layout": args.layout, "error": "PyTorch is not installed"}))
        return 3
    import torch.multiprocessing as mp
    if processes == 1:
        queue = mp.SimpleQueue()
        worker(0, 1, args, queue, models)
    else:
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        os.environ["MASTER_PORT"] = str(29500 + os.getpid() % 1000)
        procs = [ctx.Process(target=worker, args=(r, processes, args, queue, models))
                 for r in range(processes)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            print(json.dumps({"layout": args.layout, "error": "a DDP process failed"}))
            return 1
    import torch
    print(json.dumps({"layout": args.layout, "processes": processes, "threads": args.threads,
                      "precision": args.precision,
                      "torch": torch.__version__, "models": queue.get()}))
    return 0


