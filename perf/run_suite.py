#!/usr/bin/python3
"""kdp's performance suite: runs every benchmark (MPI ones at 1 and 2 ranks),
collects the headline figures (ratios against references measured in the same
run), writes one JSON file, a Markdown report and PNG charts, and compares the
ratios with a committed baseline.

    run_suite.py --build BUILD [--out DIR] [--baseline FILE] [--tolerance 0.25]
                 [--update-baseline] [--quick]
    run_suite.py --baseline-from RESULTS.json [RESULTS.json ...]

A single run of a shared machine can be off by tens of percent: a baseline
made with --baseline-from takes each ratio's median over several runs'
results.json files (and runs nothing).

Exit status: 0, or 1 when a ratio regressed beyond the tolerance against the
baseline (or a benchmark failed).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def mpirun(ranks):
    # Unbound, so that one rank may use every core (kdp divides them among ranks).
    # Without an MPI launcher (a build without MPI) one rank runs alone.
    if shutil.which("mpirun") is None:
        return [] if ranks == 1 else None
    flags = ["--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    return ["mpirun", *flags, "-np", str(ranks)]


def runnable(cmd, build):
    """Why a run cannot happen here (a launcher or a program not built), or None."""
    if cmd is None:
        return "needs mpirun for several ranks"
    program = next((c for c in cmd if c.startswith(build)), None)
    if program is not None and not os.path.exists(program):
        return f"{os.path.basename(program)} is not built (an option of this build is off)"
    return None


def slug(text):
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


# (name, command, extra description). {b} is the build directory.
def benchmarks(build, quick):
    """(name, command, extra environment) of every run, in order."""
    reps = [] if quick else ["--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"]
    # In one process the reference and the measured benchmark take turns, so a
    # noisy neighbour slows both alike instead of one of them.
    mixed = [] if quick else ["--benchmark_repetitions=5", "--benchmark_enable_random_interleaving=true",
                              "--benchmark_report_aggregates_only=true"]
    short = ["--benchmark_min_time=0.05"] if quick else []
    q = ["--kdp_quick"] if quick else []
    p = lambda name: os.path.join(build, "perf", name)  # noqa: E731
    one_thread = {"KDP_NUM_THREADS": "1"}
    runs = [
        ("linear", [p("kdp_bench_linear"), *short, *mixed], {}),
        ("ops", [p("kdp_bench_ops"), *short, *mixed], {}),
        ("data_parallel", [p("kdp_bench_data_parallel"), *short, *mixed], {}),
        # Logical devices run one after another: on one thread DataParallel's own
        # cost shows without two BLAS threads' sensitivity to a shared machine.
        ("data_parallel_1thread", [p("kdp_bench_data_parallel"), *short, *mixed], one_thread),
        ("loader", [p("kdp_bench_loader"), *short], {}),
        # With a core left to the prefetch thread (docs/performance.md: idle
        # OpenBLAS threads spin and starve it when every core runs one).
        ("loader_1thread", [p("kdp_bench_loader"), "--benchmark_filter=training_wait"], one_thread),
        ("checkpoint", [p("kdp_bench_checkpoint"), *short, *mixed], {}),
    ]
    # Scaling from 1 to 2 ranks compares like with like: the single rank gets
    # the threads each of the two ranks gets (cores / 2), as one node of two would.
    per_rank = {"KDP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // 2))}
    launch = lambda ranks, *cmd: None if mpirun(ranks) is None else [*mpirun(ranks), *cmd]  # noqa: E731
    runs.append(("ddp_r1", launch(1, p("kdp_bench_ddp"), *q, *reps), per_rank))
    runs.append(("allreduce_r2", launch(2, p("kdp_bench_allreduce"), *q, *reps), {}))
    runs.append(("ddp_r2", launch(2, p("kdp_bench_ddp"), *q, *reps), {}))
    for ranks, devs in ((1, 1), (1, 2), (2, 1)):
        runs.append((f"models_{ranks}x{devs}",
                     launch(ranks, p("kdp_bench_models"), f"--kdp_devices={devs}", *q, *reps), {}))
    # Side by side with PyTorch at processes x threads layouts, taking turns so
    # that a busy machine slows both alike; the best round of each counts.
    cores = len(os.sched_getaffinity(0))
    peer = os.path.join(HERE, "peers", "torch_mlp.py")
    for rnd in range(1 if quick else 2):
        for layout, ranks, threads in (("1x1", 1, 1), ("1xN", 1, cores), ("2x1", 2, 1)):
            runs.append((f"peer_kdp_{layout}_{rnd}", launch(ranks, p("kdp_bench_models"), *q),
                         {"KDP_NUM_THREADS": str(threads)}))
            runs.append((f"peer_torch_{layout}_{rnd}",
                         ["/usr/bin/python3", peer, "--layout", layout, *(["--quick"] if quick else [])],
                         {}))
    # Time to 88 % test accuracy on Fashion-MNIST: kdp-train and PyTorch with the
    # same model, data, batch, optimizer, learning rate and epochs.
    if not quick:
        data = os.path.join(os.path.dirname(HERE), "data", "fashion-mnist.h5")
        if not os.path.exists(data) and os.path.exists(os.path.join(build, "examples", "kdp-data")):
            os.makedirs(os.path.dirname(data), exist_ok=True)
            runs.append(("tta_import", [os.path.join(build, "examples", "kdp-data"),
                                        "import-fashion-mnist", "--out", data], {}))
        common = ["--epochs", str(TTA_EPOCHS), "--batch-size", "128", "--lr", "1e-3"]
        runs.append(("tta_kdp", [os.path.join(build, "examples", "kdp-train"), "--data", data,
                                 "--model", "784,256,256,10", "--optimizer", "adam", *common,
                                 "--progress", "lines", "--log-every", "1000000"], {}))
        runs.append(("tta_torch", ["/usr/bin/python3", os.path.join(HERE, "peers", "torch_fmnist.py"),
                                   *common, "--target", str(TTA_TARGET)], {}))
    return runs


TTA_EPOCHS = 10
# A run that hangs (a collective whose peer died, say) is stopped and reported.
RUN_TIMEOUT_S = 900
TTA_TARGET = 0.88
# The targets of kdp against PyTorch (kdp samples/s / PyTorch's), per model.
PEER_TARGETS = {("T", "1x1"): 10.0, "M": 2.0, "L": 1.0}


def parse_peer(run, text, peers):
    """Samples/s of kdp's or PyTorch's models in a peer run (the best round counts)."""
    side, layout = run.split("_")[1], run.split("_")[2]
    found = {}
    if side == "kdp":
        for m in re.finditer(r"MODEL (\w) step ([\d.]+) us, ([\d.]+) samples/s", text):
            found[m[1]] = float(m[3])
    else:
        for line in text.splitlines():
            if line.startswith("{"):
                for name, v in json.loads(line).get("models", {}).items():
                    found[name] = v["samples_per_s"]
    for name, sps in found.items():
        slot = peers.setdefault(side, {}).setdefault(layout, {})
        slot[name] = max(sps, slot.get(name, 0.0))


def parse_tta(run, text, tta):
    """Training seconds to the target test accuracy (None: not reached)."""
    if run == "tta_torch":
        for line in text.splitlines():
            if line.startswith("{"):
                tta["torch"] = json.loads(line).get("seconds_to_target")
        return
    total = 0.0
    tta["kdp"] = None
    for m in re.finditer(r"val_acc ([\d.]+) \([\d.]+ samples/s, ([\d.]+) s\)", text):
        total += float(m[2])
        if float(m[1]) >= TTA_TARGET:
            tta["kdp"] = total
            break


def suffix(run):
    return "_1_thread" if run.endswith("1thread") else ""


PATTERNS = [
    # RATIO <label> <value>  (target >= <t>: met|MISSED)
    (re.compile(r"RATIO (.+?)\s+(-?[\d.]+)\s+\(target >= ([\d.]+)"),
     lambda m, run: (slug(m[1]), float(m[2]), float(m[3]), "higher")),
    (re.compile(r"TIME\s+(.+?)\s+([\d.]+) us\s+\(target <= ([\d.]+)"),
     lambda m, run: (slug(m[1]) + "_us", float(m[2]), float(m[3]), "lower")),
    (re.compile(r"OVERHEAD DataParallel on (\d+) logical devices: ([\d.]+)x"),
     lambda m, run: (f"dataparallel_overhead_{m[1]}_devices{suffix(run)}", float(m[2]), 1.10, "lower")),
    (re.compile(r"INFO  of which smaller GEMMs \((\d+) micro-batches vs the plain step\): ([\d.]+)x, "
                r"DataParallel itself \(vs those micro-batches\): ([\d.]+)x"),
     lambda m, run: (f"dataparallel_own_overhead_{m[1]}_devices{suffix(run)}", float(m[3]), 1.10, "lower")),
    (re.compile(r"INFO  its five bare GEMM calls\s+([\d.]+) us"),
     lambda m, run: ("10_100_10_bare_gemms_us", float(m[1]), None, "info")),
    (re.compile(r"INFO  its five products in kdp's small-GEMM kernel\s+([\d.]+) us"),
     lambda m, run: ("10_100_10_small_gemm_products_us", float(m[1]), None, "info")),
    (re.compile(r"SPEEDUP DataParallel on (\d+) concurrent devices vs plain step: ([\d.]+)x"),
     lambda m, run: (f"dataparallel_speedup_{m[1]}_devices", float(m[2]), None, "higher")),
    (re.compile(r"HIDDEN allreduce hidden behind backward: ([\d.]+)"),
     lambda m, run: (f"ddp_hidden_{run}", float(m[1]), 0.8, "higher")),
    (re.compile(r"INFO  step ([\d.]+) ms \(reducing after backward ([\d.]+) ms\)"),
     lambda m, run: (f"ddp_overlapped_vs_after_backward_{run}", float(m[1]) / float(m[2]), None, "info")),
    (re.compile(r"SAMPLES_PER_S ([\d.]+)"),
     lambda m, run: (f"ddp_samples_per_s_{run}", float(m[1]), None, "info")),
    (re.compile(r"WAIT\s+share of .*?: ([\d.]+) %"),
     lambda m, run: (f"loader_wait_share{suffix(run)}", float(m[1]) / 100.0, 0.02, "lower")),
    (re.compile(r"MODEL (\w) step ([\d.]+) us, ([\d.]+) samples/s, ([\d.]+) GFLOP/s, ([\d.]+) %"),
     None),  # handled below: several figures per line
]


def parse(run, text, metrics, models):
    for pattern, make in PATTERNS:
        for m in pattern.finditer(text):
            if make is None:
                layout = run.split("_", 1)[1]
                name, step_us, sps, gflops, pct = m[1], float(m[2]), float(m[3]), float(m[4]), float(m[5])
                models.setdefault(name, {})[layout] = {
                    "step_us": step_us, "samples_per_s": sps, "gflops": gflops, "roofline": pct / 100.0}
                target = {"M": 0.70, "L": 0.85}.get(name)
                metrics[f"model_{name}_roofline_{layout}"] = {
                    "value": pct / 100.0, "target": target, "better": "higher" if target else "info"}
                if name == "T":  # the target is for one core: 1 rank x 1 device
                    one_core = layout == "1x1"
                    metrics[f"model_T_step_{layout}_us"] = {
                        "value": step_us, "target": 10.0 if one_core else None,
                        "better": "lower" if one_core else "info"}
                continue
            key, value, target, better = make(m, run)
            metrics[key] = {"value": value, "target": target, "better": better}


def met(entry):
    t, v = entry.get("target"), entry["value"]
    if t is None or entry["better"] == "info":
        return None
    return v >= t if entry["better"] == "higher" else v <= t


def charts(out, models, metrics):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files = []
    if models:
        layouts = sorted({l for m in models.values() for l in m})
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        width = 0.8 / max(1, len(layouts))
        for i, layout in enumerate(layouts):
            names = [n for n in ("T", "M", "L") if n in models]
            xs = [j + i * width for j in range(len(names))]
            axes[0].bar(xs, [models[n].get(layout, {}).get("samples_per_s", 0) for n in names], width, label=layout)
            axes[1].bar(xs, [100 * models[n].get(layout, {}).get("roofline", 0) for n in names], width, label=layout)
        for ax, title in ((axes[0], "samples/s per model and layout (ranks x devices)"),
                          (axes[1], "% of the GEMM roofline")):
            ax.set_xticks([j + width * (len(layouts) - 1) / 2 for j in range(len(names))])
            ax.set_xticklabels(names)
            ax.set_title(title, fontsize=10)
            ax.legend(fontsize=8)
            ax.grid(axis="y", alpha=0.3)
        axes[1].axhline(85, color="0.5", ls="--", lw=0.8)
        axes[1].axhline(70, color="0.7", ls=":", lw=0.8)
        fig.tight_layout()
        path = os.path.join(out, "models.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        files.append(path)
    s1 = metrics.get("ddp_samples_per_s_ddp_r1", {}).get("value")
    s2 = metrics.get("ddp_samples_per_s_ddp_r2", {}).get("value")
    if s1 and s2:
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.bar(["1 rank", "2 ranks", "2 ranks ideal"], [s1, s2, 2 * s1], color=["C0", "C1", "0.8"])
        ax.set_title(f"L with DDP: scaling efficiency {s2 / (2 * s1):.2f}", fontsize=10)
        ax.set_ylabel("samples/s")
        fig.tight_layout()
        path = os.path.join(out, "scaling.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        files.append(path)
    return files


def peer_chart(out, peers):
    """kdp / PyTorch samples/s per model and layout, as bars."""
    if not peers.get("kdp") or not peers.get("torch"):
        return []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    layouts = [l for l in ("1x1", "1xN", "2x1") if l in peers["kdp"] and l in peers["torch"]]
    names = ("T", "M", "L")
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(layouts))
    for i, layout in enumerate(layouts):
        ratios = [peers["kdp"][layout].get(n, 0) / peers["torch"][layout][n]
                  if peers["torch"][layout].get(n) else 0 for n in names]
        ax.bar([j + i * width for j in range(len(names))], ratios, width, label=layout)
    ax.set_xticks([j + width * (len(layouts) - 1) / 2 for j in range(len(names))])
    ax.set_xticklabels(names)
    ax.axhline(1.0, color="0.5", ls="--", lw=0.8)
    ax.set_yscale("log")
    ax.set_title("kdp samples/s / PyTorch samples/s (processes x threads)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out, "vs_torch.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def comparable(key, better):
    # Only dimensionless figures are compared across runs; absolute times and
    # rates depend on the machine.
    return better in ("higher", "lower") and not key.endswith("_us")


def write_baseline(path, values, note):
    with open(path, "w") as f:
        json.dump({"updated": note, "host": platform.node(), "metrics": values}, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"baseline rewritten: {path}")


def baseline_from(path, result_files):
    runs = []
    for name in result_files:
        with open(name) as f:
            runs.append(json.load(f)["metrics"])
    keys = sorted({k for run in runs for k, e in run.items() if comparable(k, e["better"])})
    values = {k: statistics.median(run[k]["value"] for run in runs if k in run) for k in keys}
    stamps = ", ".join(os.path.basename(os.path.dirname(os.path.abspath(n))) for n in result_files)
    write_baseline(path, values, f"median of {len(runs)} runs: {stamps}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build")
    ap.add_argument("--out", default=None)
    ap.add_argument("--baseline", default=os.path.join(HERE, "baseline.json"))
    ap.add_argument("--tolerance", type=float, default=0.25)
    ap.add_argument("--update-baseline", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a few iterations of each (checks the suite runs)")
    ap.add_argument("--baseline-from", nargs="+", metavar="RESULTS",
                    help="write the baseline as each ratio's median over these results.json files")
    args = ap.parse_args()
    if args.baseline_from:
        return baseline_from(args.baseline, args.baseline_from)
    if not args.build:
        ap.error("--build is required to run the suite")

    stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    out = args.out or os.path.join(HERE, "results", stamp)
    os.makedirs(out, exist_ok=True)
    metrics, models, logs, failures, skipped = {}, {}, {}, [], []
    peers, tta = {}, {}
    for name, cmd, env in benchmarks(args.build, args.quick):
        why = runnable(cmd, args.build)
        if why:
            print(f"== {name}: skipped: {why}", flush=True)
            skipped.append(f"{name}: {why}")
            continue
        shown = " ".join(f"{k}={v}" for k, v in env.items())
        print(f"== {name}: {shown + ' ' if shown else ''}{' '.join(cmd)}", flush=True)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env},
                                  timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            failures.append(f"{name} did not finish within {RUN_TIMEOUT_S} s")
            print(f"   {name}: stopped after {RUN_TIMEOUT_S} s", flush=True)
            logs[name] = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            continue
        text = proc.stdout + proc.stderr
        logs[name] = text
        with open(os.path.join(out, f"{name}.log"), "w") as f:
            f.write(text)
        if proc.returncode == 3 and "PyTorch is not installed" in text:
            print(f"   skipped: PyTorch is not installed (python3-torch)", flush=True)
            skipped.append(f"{name}: PyTorch is not installed (python3-torch)")
            continue
        if proc.returncode != 0:
            failures.append(f"{name} exited with {proc.returncode}")
            print(text[-2000:])
            continue
        if name.startswith("peer_"):
            parse_peer(name, text, peers)
        elif name.startswith("tta_"):
            parse_tta(name, text, tta)
        else:
            parse(name, text, metrics, models)
    for layout, kdp_models in sorted(peers.get("kdp", {}).items()):
        for model, sps in sorted(kdp_models.items()):
            theirs = peers.get("torch", {}).get(layout, {}).get(model)
            if not theirs:
                continue
            target = PEER_TARGETS.get((model, layout), PEER_TARGETS.get(model))
            metrics[f"kdp_vs_torch_{model}_{layout}"] = {
                "value": sps / theirs, "target": target, "better": "higher" if target else "info"}
    for side in ("kdp", "torch"):
        if side in tta:
            metrics[f"time_to_88_{side}_s"] = {
                "value": float("nan") if tta[side] is None else tta[side], "target": None, "better": "info"}
    if tta.get("kdp") and tta.get("torch"):
        metrics["kdp_vs_torch_time_to_88"] = {"value": tta["kdp"] / tta["torch"], "target": 0.5,
                                              "better": "lower"}
    s1 = metrics.get("ddp_samples_per_s_ddp_r1", {}).get("value")
    s2 = metrics.get("ddp_samples_per_s_ddp_r2", {}).get("value")
    if s1 and s2:
        metrics["ddp_scaling_efficiency_L_1_to_2_ranks"] = {"value": s2 / (2 * s1), "target": 0.9, "better": "higher"}
    best = {}
    for name, layouts in models.items():
        layout = max(layouts, key=lambda l: layouts[l]["samples_per_s"])
        best[name] = {"layout": layout, **layouts[layout]}

    baseline = {}
    if os.path.exists(args.baseline):
        with open(args.baseline) as f:
            baseline = json.load(f).get("metrics", {})
    regressions = []
    for key, entry in sorted(metrics.items()):
        base = baseline.get(key)
        entry["baseline"] = base
        if base is None or not comparable(key, entry["better"]):
            continue
        if entry["better"] == "higher" and entry["value"] < base * (1 - args.tolerance):
            regressions.append(f"{key}: {entry['value']:.3f} < baseline {base:.3f} - {args.tolerance:.0%}")
        if entry["better"] == "lower" and entry["value"] > base * (1 + args.tolerance):
            regressions.append(f"{key}: {entry['value']:.3f} > baseline {base:.3f} + {args.tolerance:.0%}")

    result = {"timestamp": stamp, "host": platform.node(), "cpus": os.cpu_count(),
              "metrics": metrics, "models": models, "best_layouts": best, "peers": peers,
              "time_to_88": tta,
              "regressions": regressions, "failures": failures, "skipped": skipped,
              "tolerance": args.tolerance}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
    pictures = charts(out, models, metrics) + peer_chart(out, peers)

    lines = [f"# kdp performance report ({stamp})", "",
             f"Host {platform.node()}, {os.cpu_count()} CPUs. Every figure is a ratio against a "
             f"reference measured in the same run unless its name ends in _us or says samples/s. "
             f"Regression tolerance against the baseline: {args.tolerance:.0%}.", "",
             "| metric | value | target | met | baseline |", "|---|---|---|---|---|"]
    for key, e in sorted(metrics.items()):
        ok = met(e)
        lines.append(f"| {key} | {e['value']:.4g} | {'' if e['target'] is None else e['target']} | "
                     f"{'' if ok is None else ('yes' if ok else 'NO')} | "
                     f"{'' if e.get('baseline') is None else format(e['baseline'], '.4g')} |")
    lines += ["", "## Reference models by layout (ranks x devices per rank)", "",
              "| model | layout | step (us) | samples/s | GFLOP/s | roofline |", "|---|---|---|---|---|---|"]
    for name in ("T", "M", "L"):
        for layout, v in sorted(models.get(name, {}).items()):
            mark = " (best)" if best.get(name, {}).get("layout") == layout else ""
            lines.append(f"| {name} | {layout}{mark} | {v['step_us']:.1f} | {v['samples_per_s']:.0f} | "
                         f"{v['gflops']:.1f} | {100 * v['roofline']:.1f} % |")
    if peers.get("torch"):
        lines += ["", "## Side by side with PyTorch (processes x threads)", "",
                  "| model | layout | kdp samples/s | PyTorch samples/s | kdp / PyTorch |",
                  "|---|---|---|---|---|"]
        for name in ("T", "M", "L"):
            for layout in ("1x1", "1xN", "2x1"):
                mine = peers.get("kdp", {}).get(layout, {}).get(name)
                theirs = peers["torch"].get(layout, {}).get(name)
                if mine and theirs:
                    lines.append(f"| {name} | {layout} | {mine:.0f} | {theirs:.0f} | {mine / theirs:.2f} |")
    if tta:
        shown = {k: ("not reached" if v is None else f"{v:.1f} s") for k, v in tta.items()}
        lines += ["", f"Time to {TTA_TARGET:.0%} test accuracy on Fashion-MNIST (training time, "
                      f"784-256-256-10, Adam 1e-3, batch 128): kdp {shown.get('kdp', 'not run')}, "
                      f"PyTorch {shown.get('torch', 'not run')}."]
    lines += [""] + [f"![{os.path.basename(p)}]({os.path.basename(p)})" for p in pictures]
    if regressions:
        lines += ["", "## Regressions", ""] + [f"- {r}" for r in regressions]
    if failures:
        lines += ["", "## Failures", ""] + [f"- {r}" for r in failures]
    if skipped:
        lines += ["", "## Not run here", ""] + [f"- {r}" for r in skipped]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

    print("\n".join(lines[6:]))
    for name, b in best.items():
        print(f"best layout for {name}: {b['layout']} ({b['samples_per_s']:.0f} samples/s)")
    print(f"\nresults: {os.path.join(out, 'results.json')}\nreport:  {os.path.join(out, 'report.md')}")
    if args.update_baseline:
        write_baseline(args.baseline, {k: e["value"] for k, e in metrics.items()
                                        if comparable(k, e["better"])}, stamp)
        return 1 if failures else 0
    if regressions:
        print("REGRESSIONS (beyond the tolerance):\n  " + "\n  ".join(regressions))
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
    return 1 if regressions or failures else 0


if __name__ == "__main__":
    sys.exit(main())
