#!/usr/bin/python3
"""kdp's DDP scaling model: the step time of data-parallel training on p ranks
from the compute of one rank and the allreduce that backward does not hide.

    scaling_model.py check RESULTS_DIR|LOG     predictions against the emulated cluster's runs
    scaling_model.py predict RESULTS_DIR       M, L and the CNN E at 8-512 ranks, 25 and 100 Gbit/s

RESULTS_DIR is a perf suite output (scripts/perf.sh): its logs/ hold the
PROFILE lines of kdp_bench_ddp (the compute profile of a step and each
bucket's size and reduction time alone; a LOG file of such lines does too)
and results.json the models' steps.

The model. Backward makes bucket k's gradients final at r_k after the step's
start (measured); the buckets are reduced one after another in that order, so
bucket k's reduction ends at

    e_k = max(r_k, e_{k-1}) + T(n_k, p)

and the step ends at max(e_last, end of backward) + optimizer. A ring
allreduce of n bytes over p ranks takes

    T(n, p) = 2 (p - 1) alpha + 2 (p - 1) / p * n * beta / c

with alpha the latency of one message, beta the seconds per byte of the link
and c the compression (2 for bfloat16). Hierarchical, with q ranks per node:
a reduce and a broadcast inside the node (n beta_node each) and the ring among
the p / q leaders. Each rank's compute does not change with p (the batch per
rank is fixed), so the scaling efficiency is compute / step.

alpha and beta of an emulated link are fitted to the buckets' reduction times
alone at 2 ranks (T = 2 alpha + n beta), where nothing else runs.
"""
import glob
import json
import os
import re
import sys

NETWORKS = {"25 Gbit/s": (5e-6, 8 / 25e9), "100 Gbit/s": (3e-6, 8 / 100e9)}
NODE_BETA = 1 / 10e9  # shared memory inside a node, seconds per byte (about 10 GB/s)
NODE_ALPHA = 1e-6
RANKS_PER_NODE = 8  # as Horovod's 512-GPU figure: 8 per node
SCALES = (8, 16, 32, 64, 128, 256, 512)
HOOKS = ("allreduce", "bf16", "hierarchical", "hierarchical-bf16")
BUCKETS_MB = (1, 5, 25, 100)
# Horovod's published figure for comparison: ResNet-101, 512 GPUs, 25 Gbit/s RoCE.
HOROVOD = "Horovod: 90 % for ResNet-101 at 512 GPUs on 25 Gbit/s RoCE"


def profiles(source):
    """Every PROFILE line of a suite's logs (a results directory) or of log
    files, keyed by the figure's name, ranks and hook."""
    paths = sorted(glob.glob(os.path.join(source, "logs", "*.log"))) if os.path.isdir(source) else [source]
    out = {}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("PROFILE "):
                    prof = json.loads(line[len("PROFILE "):])
                    out[f"{prof['name']} {prof['ranks']} ranks {prof['hook']}"] = prof
    return out


def ring(n, p, alpha, beta, compression=1.0):
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta / compression


def allreduce_time(n, p, hook, alpha, beta, per_node=1):
    compression = 2.0 if hook.endswith("bf16") else 1.0
    nodes = max(1, p // max(1, per_node))
    if nodes == 1:  # every rank on one node: shared memory only
        return ring(n, p, NODE_ALPHA, NODE_BETA, compression)
    if hook.startswith("hierarchical") and per_node > 1:
        return 2 * n * NODE_BETA + ring(n, nodes, alpha, beta, compression)
    # The plain ring over all ranks, ordered by node: each step waits for the
    # hop that crosses the network.
    return ring(n, p, alpha, beta, compression)


def step_time(buckets, compute_ms, optimizer_ms, p, hook, alpha, beta, per_node=1):
    """buckets: [(bytes, ready_ms)] in launch order."""
    end = 0.0
    for n, ready in buckets:
        end = max(end, ready) + 1e3 * allreduce_time(n, p, hook, alpha, beta, per_node)
    backward_end = compute_ms - optimizer_ms
    return max(end, backward_end) + optimizer_ms


def fit_link(runs):
    """alpha, beta (seconds, seconds per byte) from 2-rank buckets' times alone."""
    xs, ys = [], []
    for prof in runs:
        if prof["ranks"] != 2 or prof["hook"] != "allreduce":
            continue
        for b in prof["buckets"]:
            xs.append(b["bytes"])
            ys.append(b["comm_alone_ms"] * 1e-3)
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else my / mx
    alpha = max(0.0, (my - beta * mx) / 2)
    return alpha, beta


def check(results):
    profs = profiles(results)
    by_rate = {}
    for run, prof in profs.items():
        m = re.search(r"(\d+[mg]bit)", prof["name"])
        if m and prof["nodes"] > 1:
            by_rate.setdefault(m[1], []).append((run, prof))
    if not by_rate:
        sys.exit(f"{results}: no runs on the emulated cluster (PROFILE lines of kdp_bench_ddp)")
    print("| run | ranks | measured step (ms) | predicted (ms) | error |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for rate, runs in sorted(by_rate.items()):
        link = fit_link([p for _, p in runs])
        if link is None:
            continue
        alpha, beta = link
        print(f"| link {rate}: alpha {alpha * 1e6:.0f} us, beta {8 / beta / 1e9:.2f} Gbit/s | | | | |")
        for run, prof in runs:
            buckets = [(b["bytes"], b["ready_ms"]) for b in prof["buckets"]]
            per_node = prof["ranks"] // max(1, prof["nodes"])
            predicted = step_time(buckets, prof["local_ms"], prof["optimizer_ms"], prof["ranks"],
                                  prof["hook"], alpha, beta, per_node)
            err = predicted / prof["step_ms"] - 1
            worst = max(worst, abs(err))
            print(f"| {run} | {prof['ranks']} | {prof['step_ms']:.1f} | {predicted:.1f} | {err:+.0%} |")
    print(f"\nlargest error {worst:.0%} (target within 15 %)")
    return worst


# Compute profiles of the predicted models: (name, layer parameter counts in
# forward order, FLOPs share of each layer's backward, step ms, optimizer ms).
def model_profile(name, results):
    """Buckets' ready times from a layer-by-layer split of the measured step."""
    with open(os.path.join(results, "results.json")) as f:
        models = json.load(f).get("models", {})
    layers = {
        # MLPs at batch 256: parameters and multiply-adds per layer.
        "M": [(784 * 256 + 256, 784 * 256), (256 * 256 + 256, 256 * 256), (256 * 10 + 10, 2560)],
        "L": [(784 * 1024 + 1024, 784 * 1024), (1024 * 1024 + 1024, 1024 * 1024),
              (1024 * 10 + 10, 10240)],
        # The CNN E (issue M) per sample: conv 1->32 k3, conv 32->64 k3, linear 9216->128, 128->10.
        "E": [(320, 26 * 26 * 32 * 9), (18496, 24 * 24 * 64 * 32 * 9), (9216 * 128 + 128, 9216 * 128),
              (1290, 1280)],
    }[name]
    step_ms = models[name]["1x1"]["step_us"] * 1e-3
    optimizer_ms = 0.05 * step_ms
    backward_ms = (step_ms - optimizer_ms) * 2 / 3  # backward is twice forward's work
    forward_ms = step_ms - optimizer_ms - backward_ms
    total = sum(m for _, m in layers)
    # Reverse order: the last layer's gradient is final first.
    ready, t = [], forward_ms
    for params, macs in reversed(layers):
        t += backward_ms * macs / total
        ready.append((params * 4, t))
    return ready, step_ms, optimizer_ms


def bucketed(ready, cap_mb):
    """Layers' gradients grouped into buckets of about cap_mb (first bucket 1 MB)."""
    out, size, cap = [], 0, 1 << 20
    for n, t in ready:
        size += n
        if size >= cap:
            out.append((size, t))
            size, cap = 0, cap_mb << 20
    if size:
        out.append((size, ready[-1][1]))
    return out


def best_of(hooks, ready, step_ms, optimizer_ms, p, alpha, beta, per_node):
    best = None
    for hook in hooks:
        for cap in BUCKETS_MB:
            t = step_time(bucketed(ready, cap), step_ms, optimizer_ms, p, hook, alpha, beta, per_node)
            if best is None or t < best[0] - 1e-9:
                best = (t, hook, cap)
    return best


def predict(results):
    print("| model | network | ranks | plain allreduce, 25 MB | best exact (hook, MB) | "
          "best with bf16 (hook, MB) |")
    print("|---|---|---|---|---|---|")
    for name in ("M", "L", "E"):
        ready, step_ms, optimizer_ms = model_profile(name, results)
        for net, (alpha, beta) in NETWORKS.items():
            for p in SCALES:
                per_node = min(RANKS_PER_NODE, p)
                plain = step_time(bucketed(ready, 25), step_ms, optimizer_ms, p, "allreduce", alpha, beta,
                                  per_node)
                exact = best_of(("allreduce", "hierarchical"), ready, step_ms, optimizer_ms, p, alpha, beta,
                                per_node)
                lossy = best_of(HOOKS, ready, step_ms, optimizer_ms, p, alpha, beta, per_node)
                print(f"| {name} | {net} | {p} | {step_ms / plain:.0%} | {step_ms / exact[0]:.0%} "
                      f"({exact[1]}, {exact[2]}) | {step_ms / lossy[0]:.0%} ({lossy[1]}, {lossy[2]}) |")
    print(f"\nEfficiency = one rank's step / the predicted step. {HOROVOD}; {RANKS_PER_NODE} ranks per "
          f"node, shared memory at {1 / NODE_BETA / 1e9:.0f} GB/s; compute per rank as measured here "
          "(results.json, 1 rank).")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "predict"):
        sys.exit(__doc__)
    if sys.argv[1] == "check":
        worst = check(sys.argv[2])
        sys.exit(0 if worst <= 0.15 else 1)
    predict(sys.argv[2])


if __name__ == "__main__":
    main()
