#!/usr/bin/python3
"""kdp's performance suite: runs every benchmark (MPI ones at 1 and 2 ranks),
collects the headline figures (ratios against references measured in the same
run), writes one JSON file, a Markdown report and PNG charts, and compares the
ratios with the baseline of this kind of machine (perf/baselines.py).

    run_suite.py --build BUILD [--out DIR] [--tolerance 0.25] [--absolute-tolerance 0.02]
                 [--baseline FILE] [--update-baseline] [--quick] [--peer-python PYTHON]
    run_suite.py --baseline-from RESULTS.json [RESULTS.json ...]

Baselines are per machine kind, perf/baselines/<cpu>-<cores>c-<backend>.json:
the first run on a kind without one records it (and says so) instead of
comparing with another CPU's figures; --update-baseline adds a run to it.

The PyTorch and Lightning peers run with --peer-python (scripts/perf.sh passes
the interpreter of the peers' virtual environment); the report names the
versions they ran.

A single run of a shared machine can be off by tens of percent: a baseline
keeps the spread of its last runs, and --baseline-from makes one from several
runs' results.json files (and runs nothing).

Exit status: 0, or 1 when a figure left the baseline's spread by more than the
tolerance (or a benchmark failed).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

import baselines

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


class NotHere(str):
    """A run this machine cannot make (no network namespaces, say): reported
    as not run, without failing the suite."""


class CannotRun(str):
    """A run the suite meant to make that cannot happen (a program not built,
    no launcher, no data): reported, and the suite fails."""


def runnable(cmd, build):
    """Why a run cannot happen here (a NotHere or CannotRun reason), or None."""
    if isinstance(cmd, str):
        return cmd
    if cmd is None:
        return CannotRun("needs mpirun for several ranks")
    program = next((c for c in cmd if c.startswith(build)), None)
    if program is not None and not os.path.exists(program):
        return not_built(program)
    return None


def not_built(program):
    return CannotRun(f"{os.path.basename(program)} is not built (an option of this build is off)")


# Escape sequences of a terminal (colours, cursor moves): Google Benchmark
# colours its console output when it finds a terminal, and a code in front of
# a line would hide it from the patterns below.
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def uncoloured(text):
    return ANSI.sub("", text)


# The dataset of the accuracy, reproducible-mode and time-to-accuracy runs: the
# suite imports it itself (kdp-data) before the first run that reads it.
DATA = os.path.join(os.path.dirname(HERE), "data", "fashion-mnist.h5")
IMPORT = "import_fashion_mnist"


def needs_data(cmd):
    return isinstance(cmd, list) and any(DATA in c for c in cmd)


def with_data(runs, build):
    """The runs, with the import of DATA in front where one of them reads it
    and it is not there yet."""
    if os.path.exists(DATA) or not any(needs_data(cmd) for _, cmd, _ in runs):
        return runs
    return [(IMPORT, [os.path.join(build, "tools", "kdp-data"), "import-fashion-mnist",
                                      "--out", DATA], {}), *runs]


def slug(text):
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


# (name, command, extra description). {b} is the build directory.
def repeated(quick, n, interleaved=False, min_time=None):
    """Google Benchmark's flags for `n` repetitions reported as aggregates
    (none in a quick run): `interleaved`, the benchmarks of one process take
    turns; `min_time`, seconds each repetition runs at least."""
    if quick:
        return []
    return [f"--benchmark_repetitions={n}",
            *(["--benchmark_enable_random_interleaving=true"] if interleaved else []),
            "--benchmark_report_aggregates_only=true",
            *([f"--benchmark_min_time={min_time}"] if min_time else [])]


def benchmarks(build, quick, python="/usr/bin/python3"):
    """(name, command, extra environment) of every run, in order."""
    reps = repeated(quick, 3)
    # In one process the reference and the measured benchmark take turns, so a
    # noisy neighbour slows both alike instead of one of them.
    mixed = repeated(quick, 5, interleaved=True)
    # The convolutions' long runs take three turns (two minutes at five) of a
    # quarter second each: the turns, more than their length, give the spread.
    mixed3 = repeated(quick, 3, interleaved=True, min_time=0.25)
    short = ["--benchmark_min_time=0.05"] if quick else []
    q = ["--kdp_quick"] if quick else []
    p = lambda name: os.path.join(build, "perf", name)  # noqa: E731
    one_thread = {"KDP_NUM_THREADS": "1"}
    # The convolutions' forward+backward and the GEMM rooflines (the forward
    # alone, oneDNN's against the direct loops, is the 2-thread run's).
    conv_and_roofline = "conv/layer|conv/forward_backward|conv3d|gemm/raw"
    runs = [
        ("linear", [p("kdp_bench_linear"), *short, *mixed], {}),
        ("ops", [p("kdp_bench_ops"), *short, *mixed3], {}),
        # The convolution against one core's GEMM, as PyTorch's figures are given.
        ("ops_1thread", [p("kdp_bench_ops"), f"--benchmark_filter={conv_and_roofline}", *short, *mixed3],
         one_thread),
        # The same on kdp's own im2col and GEMM path: the two paths per shape.
        ("ops_im2col_1thread", [p("kdp_bench_ops"), f"--benchmark_filter={conv_and_roofline}", *short,
                                *mixed3],
         {**one_thread, "KDP_CONV_PATH": "im2col"}),
        ("data_parallel", [p("kdp_bench_data_parallel"), *short, *mixed], {}),
        # Logical devices run one after another: on one thread DataParallel's own
        # cost shows without two BLAS threads' sensitivity to a shared machine.
        ("data_parallel_1thread", [p("kdp_bench_data_parallel"), *short, *mixed], one_thread),
        ("loader", [p("kdp_bench_loader"), *short], {}),
        # With a core left to the prefetch thread (docs/performance.md: idle
        # OpenBLAS threads spin and starve it when every core runs one).
        ("loader_1thread", [p("kdp_bench_loader"), "--benchmark_filter=training_wait"], one_thread),
        ("checkpoint", [p("kdp_bench_checkpoint"), *short, *mixed], {}),
        # Attention alone on one thread, kdp and PyTorch's SDPA (fp32, bf16).
        ("attention", [p("kdp_bench_attention"), *(["--quick"] if quick else [])], one_thread),
        ("attention_torch", [python, os.path.join(HERE, "peers", "torch_attention.py"),
                             *(["--quick"] if quick else [])], {}),
    ]
    # Scaling from 1 to 2 ranks compares like with like: the single rank gets
    # the threads each of the two ranks gets (cores / 2), as one node of two would.
    per_rank = {"KDP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // 2))}
    launch = lambda ranks, *cmd: None if mpirun(ranks) is None else [*mpirun(ranks), *cmd]  # noqa: E731
    runs.append(("ddp_r1", launch(1, p("kdp_bench_ddp"), *q, *reps), per_rank))
    runs.append(("ddp_r1_D", launch(1, p("kdp_bench_ddp"), "--kdp_model=D", *q, *reps), per_rank))
    runs.append(("allreduce_r2", launch(2, p("kdp_bench_allreduce"), *q, *reps), {}))
    runs.append(("ddp_r2", launch(2, p("kdp_bench_ddp"), *q, *reps), {}))
    # ZeRO-1 against the replicated optimizer, side by side in one run.
    for ranks in (2, 4):
        runs.append((f"zero_r{ranks}", launch(ranks, p("kdp_bench_zero"), *q), {}))
    # The models by layout, two repetitions each (the peer rounds below time
    # the same configurations as 1x1 and 2x1, there 1xN and 2x1, twice more).
    for ranks, devs in ((1, 1), (1, 2), (2, 1)):
        runs.append((f"models_{ranks}x{devs}",
                     launch(ranks, p("kdp_bench_models"), f"--kdp_devices={devs}", *q,
                            *repeated(quick, 2)), {}))
    if not quick:  # the quick suite (a CTest smoke test) makes no namespaces
        runs += cluster_runs(p("kdp_bench_ddp"), q, [])  # one repetition: 30 steps of L, 12 of D
        # Accuracy after 10 epochs with each hook, 2 nodes x 2 ranks, on an unshaped link.
        runs += cluster_accuracy_runs(os.path.join(build, "tools", "kdp-train"))
        runs += reproducible_runs(os.path.join(build, "tools", "kdp-train"))
    # Side by side with PyTorch at processes x threads layouts, taking turns so
    # that a busy machine slows both alike; the best round of each counts.
    cores = len(os.sched_getaffinity(0))
    peer = lambda name: os.path.join(HERE, "peers", name)  # noqa: E731
    for rnd in range(1 if quick else 2):
        for layout, ranks, threads in (("1x1", 1, 1), ("1xN", 1, cores), ("2x1", 2, 1)):
            runs.append((f"peer_kdp_{layout}_{rnd}", launch(ranks, p("kdp_bench_models"), *q),
                         {"KDP_NUM_THREADS": str(threads)}))
            for script in ("torch_mlp.py", "torch_cnn.py"):
                # The GPT's 0.7 s steps are timed where its target is, on one core.
                models = ["--models", "H,E,B,V"] if script == "torch_cnn.py" and layout != "1x1" else []
                runs.append((f"peer_torch_{layout}_{rnd}_{script[6:9]}",
                             [python, peer(script), "--layout", layout, *models,
                              *(["--quick"] if quick else [])], {}))
            if layout == "1x1":  # PyTorch's best on one core may be its bf16 autocast
                for script in ("torch_mlp.py", "torch_cnn.py"):
                    runs.append((f"peer_torch_{layout}_{rnd}_{script[6:9]}_bf16",
                                 [python, peer(script), "--layout", layout, "--precision", "bf16",
                                  *(["--quick"] if quick else [])], {}))
    # Time to 88 % test accuracy on Fashion-MNIST: kdp-train and PyTorch with the
    # same model, data, batch, optimizer, learning rate and epochs, each at
    # TTA_SEEDS seeds: the epoch that first reaches 88 % varies by one or two
    # with the draws of initialisation and shuffling, on either side.
    if not quick:
        common = ["--epochs", str(TTA_EPOCHS), "--batch-size", "128", "--lr", "1e-3"]
        for seed in range(TTA_SEEDS):
            runs.append((f"tta_kdp_seed{seed}",
                         [os.path.join(build, "tools", "kdp-train"), "--data", DATA, "--model",
                          "784,256,256,10", "--optimizer", "adam", *common, "--seed", str(seed),
                          "--stop-at-accuracy", str(TTA_TARGET), "--progress", "lines",
                          "--log-every", "1000000"], {}))
            runs.append((f"tta_torch_seed{seed}",
                         [python, peer("torch_fmnist.py"), *common, "--target", str(TTA_TARGET),
                          "--stop-at-target", "--seed", str(seed)], {}))
        # The pytorch/examples CNN (E) to 91 %, wall time from launch, at 2x1 (two
        # processes of one thread, data-parallel): kdp-train, a plain PyTorch DDP
        # loop and Lightning's Trainer with its "ddp" strategy.
        recipe = ["--epochs", str(CNN_TTA_EPOCHS), "--batch-size", "64", "--lr", "1.0", "--gamma", "0.7"]
        two = ["--processes", "2", "--threads", "1"]
        kdp_train = launch(2, os.path.join(build, "tools", "kdp-train"), "--data", DATA, "--model", CNN_E,
                           "--optimizer", "adadelta", "--scheduler", "step", "--step-size", "1",
                           "--stop-at-accuracy", str(CNN_TTA_TARGET), *recipe, "--progress", "lines",
                           "--log-every", "1000000")
        runs.append(("tta_cnn_kdp", kdp_train, {"KDP_NUM_THREADS": "1"}))
        runs.append(("tta_cnn_torch", [python, peer("torch_fmnist.py"), "--model", "cnn", *recipe, *two,
                                       "--target", str(CNN_TTA_TARGET), "--stop-at-target"], {}))
        runs.append(("tta_cnn_lightning", [python, peer("lightning_fmnist.py"), *recipe, *two,
                                           "--target", str(CNN_TTA_TARGET)], {}))
        # The same three with bf16 products: kdp-train --precision bf16, the loop
        # under torch.autocast, Lightning's precision="bf16-mixed".
        runs.append(("tta_cnn_kdp_bf16", [*kdp_train, "--precision", "bf16"], {"KDP_NUM_THREADS": "1"}))
        runs.append(("tta_cnn_torch_bf16", [python, peer("torch_fmnist.py"), "--model", "cnn", *recipe, *two,
                                            "--target", str(CNN_TTA_TARGET), "--stop-at-target",
                                            "--precision", "bf16"], {}))
        runs.append(("tta_cnn_lightning_bf16", [python, peer("lightning_fmnist.py"), *recipe, *two,
                                                "--target", str(CNN_TTA_TARGET), "--precision", "bf16"], {}))
        # The reference ViT to 88 %, wall time from launch at 2x1, with the
        # demo's recipe: kdp-train and a PyTorch DDP loop, each precision.
        vit_recipe = ["--epochs", str(VIT_TTA_EPOCHS), "--batch-size", "128", "--lr", "1e-3"]
        kdp_vit = launch(2, os.path.join(build, "tools", "kdp-train"), "--data", DATA, "--model", VIT,
                         "--optimizer", "adamw", "--scheduler", "cosine", "--stop-at-accuracy",
                         str(TTA_TARGET), *vit_recipe, "--progress", "lines", "--log-every", "1000000")
        torch_vit = [python, peer("torch_fmnist.py"), "--model", "vit", *vit_recipe, *two,
                     "--target", str(TTA_TARGET), "--stop-at-target"]
        runs.append(("tta_vit_kdp", kdp_vit, {"KDP_NUM_THREADS": "1"}))
        runs.append(("tta_vit_kdp_bf16", [*kdp_vit, "--precision", "bf16"], {"KDP_NUM_THREADS": "1"}))
        runs.append(("tta_vit_torch", torch_vit, {}))
        runs.append(("tta_vit_torch_bf16", [*torch_vit, "--precision", "bf16"], {}))
    return runs


CLUSTER = os.path.join(os.path.dirname(HERE), "scripts", "cluster.sh")
# Links at or below what veth TCP carries on a 2-core machine (1-1.5 Gbit/s).
CLUSTER_RATES = ("1gbit", "250mbit")
HOOK_NAMES = ("allreduce", "bf16", "hierarchical", "hierarchical-bf16")


def cluster_runs(bench, q, reps):
    """DDP on the emulated cluster (scripts/cluster.sh): L and D on 2 nodes x 1
    rank at each link rate, and L's hooks on 2 nodes x 2 ranks, 1 thread per
    rank. Not run where this machine cannot make network namespaces."""
    here = cluster_here()

    def on_cluster(rate, nodes, per_node, *args):
        if here is not None:
            return here
        up = f"{CLUSTER} up --name kdpperf --nodes {nodes} --rate {rate} >/dev/null"
        run = f"{CLUSTER} run --name kdpperf --ranks-per-node {per_node} -- " + " ".join(args)
        return ["bash", "-c", f"{CLUSTER} down --name kdpperf >/dev/null; {up} && {run}; rc=$?; "
                              f"{CLUSTER} down --name kdpperf >/dev/null; exit $rc"]
    one = {"KDP_NUM_THREADS": "1"}
    runs = []
    for rate in CLUSTER_RATES:
        # On the slow link L's step takes about twice as long: half the steps;
        # D's (more parameters, less compute a byte) four to five times: a third.
        steps = {"L": [], "D": []} if rate != "250mbit" or q else {"L": ["--kdp_steps=15"],
                                                                   "D": ["--kdp_steps=4"]}
        for model in ("L", "D"):
            runs.append((f"cluster_{model}_{rate}",
                         on_cluster(rate, 2, 1, bench, f"--kdp_model={model}", f"--kdp_label={rate}", *q,
                                    *steps[model], *reps), one))
        # 3 and 4 nodes check the scaling model's ring (2 cores: ranks share
        # them); on the slow link only with --extra.
        for nodes in (3, 4):
            runs.append((f"cluster{nodes}n_L_{rate}",
                         on_cluster(rate, nodes, 1, bench, "--kdp_model=L", f"--kdp_label={rate}_{nodes}n",
                                    *q, *steps["L"], *reps), one))
    for hook in HOOK_NAMES:
        runs.append((f"cluster2x2_L_1gbit_{hook}",
                     on_cluster("1gbit", 2, 2, bench, "--kdp_model=L", "--kdp_label=1gbit_2x2",
                                f"--kdp_hook={hook}", *q, *reps), one))
    return runs


def cluster_here():
    """None where scripts/cluster.sh can make its namespaces, else why not."""
    check = subprocess.run([CLUSTER, "check"], capture_output=True, text=True)
    if check.returncode == 0:
        return None
    why = (check.stdout + check.stderr).strip().splitlines()
    return NotHere("no emulated cluster on this machine" + (f" ({why[-1]})" if why else ""))


def reproducible_runs(train):
    """kdp-train's step in reproducible mode against DDP's exchange
    (--no-reproducible), taking turns three times in one run (the better rate
    of each mode counts, so that a busy moment slows both alike): on
    Fashion-MNIST at a global batch of 240, L at 2 and 4 ranks (the target's
    layouts), at 1 rank with the rank's threads and with 2 devices, and in
    bf16 at 2 ranks; a CNN with SyncBatchNorm at 2; the reference transformers at 2 ranks, the ViT on
    Fashion-MNIST (batch 128) and the GPT on byte windows of kdp's own docs
    (batch 32), which the run imports into a scratch folder and removes."""
    cnn = "'conv(16,3,1,1),batchnorm,relu,maxpool(2),flatten,linear(10)' --sync-batchnorm"
    cores = len(os.sched_getaffinity(0))
    mlp = "784,1024,1024,10"
    text = "$scratch/text.h5"
    docs = " ".join(os.path.join(os.path.dirname(HERE), f) for f in ("README.md", "docs/*.md"))
    # label, model, ranks, threads, extra options, data, batch, steps, target
    layouts = (("step", mlp, 2, 1, "", DATA, 240, 60, True),
               ("step", mlp, 4, 1, "", DATA, 240, 60, True),
               ("step_threads", mlp, 1, cores, "", DATA, 240, 60, False),
               ("step_devices", mlp, 1, cores, "--devices 2", DATA, 240, 60, False),
               ("step_bf16", mlp, 2, 1, "--precision bf16", DATA, 240, 60, True),
               ("step_sync_batchnorm_cnn", cnn, 2, 1, "", DATA, 240, 60, False),
               ("step_vit", "'vit(4,64,6,4,128)'", 2, 1, "", DATA, 128, 20, True),
               ("step_gpt", "'gpt(4,4,128)'", 2, 1, "", text, 32, 12, True))
    runs = []
    for label, model, ranks, threads, extra, data, batch, steps, targeted in layouts:
        name = f"reproducible_{label}_r{ranks}"
        if not os.path.exists(train) or mpirun(ranks) is None:
            runs.append((name, not_built(train) if mpirun(ranks) is not None else None, {}))
            continue
        launch = " ".join(mpirun(ranks))
        common = (f"{launch} {train} --data {data} --model {model} --batch-size {batch} "
                  f"--threads {threads} {extra} --max-steps {steps} --progress lines --log-every 1000000")
        rate = "sed -n 's/.*samples_per_s=\\([0-9.]*\\).*/\\1/p'"
        target = "(target <= 1.10)" if targeted else ""
        setup = ""
        if data == text:
            kdp_data = os.path.join(os.path.dirname(train), "kdp-data")
            setup = (f"scratch=$(mktemp -d) && trap 'rm -rf \"$scratch\"' EXIT && "
                     f"{kdp_data} import-text {docs} --context 256 --out {text} >/dev/null && ")
        cmd = (f"{setup}a=0; b=0; for round in 1 2 3; do "
               f"x=$({common} --no-reproducible | {rate}); y=$({common} --reproducible | {rate}); "
               f"echo \"INFO  round $round: --no-reproducible $x samples/s, --reproducible $y samples/s\"; "
               f"a=$(awk -v a=$a -v x=$x 'BEGIN {{print (x > a ? x : a)}}'); "
               f"b=$(awk -v b=$b -v y=$y 'BEGIN {{print (y > b ? y : b)}}'); done; "
               f"awk -v a=\"$a\" -v b=\"$b\" 'BEGIN {{printf \"REPRODUCIBLE {label}_r{ranks} %.3f "
               f"{target}\\n\", a / b}}'")
        runs.append((name, ["bash", "-c", cmd], {}))
    return runs


def cluster_accuracy_runs(train):
    """Each hook's test accuracy after TTA_EPOCHS epochs, 2 nodes x 2 ranks.
    The link is left unshaped: its rate changes the time, never the bits
    (the same gradients cross it in the same order) nor the bytes sent, which
    are what these runs report; the step's time on a shaped link is
    cluster_runs' to measure."""
    here = cluster_here()
    runs = []
    for hook in HOOK_NAMES:
        name = f"cluster_accuracy_{hook}"
        if here is not None or not os.path.exists(train):
            runs.append((name, here if here is not None else not_built(train), {}))
            continue
        cmd = (f"{CLUSTER} down --name kdpacc >/dev/null; {CLUSTER} up --name kdpacc --nodes 2 --rate none "
               f">/dev/null && {CLUSTER} run --name kdpacc --ranks-per-node 2 -- {train} --data {DATA} "
               f"--epochs {TTA_EPOCHS} --comm-hook {hook} --seed 0 --progress lines --log-every 1000000; "
               f"rc=$?; {CLUSTER} down --name kdpacc >/dev/null; exit $rc")
        runs.append((name, ["bash", "-c", cmd], {"KDP_NUM_THREADS": "1"}))
    return runs


TTA_EPOCHS = 10
TTA_SEEDS = 5  # the MLP's time to 88 % is each side's median over these seeds
VIT_TTA_SIDES = ("kdp", "kdp_bf16", "torch", "torch_bf16")
# Runs whose figures are information only and which a full run leaves out to
# keep within 30 minutes on 2 cores: --only NAME (or --extra) runs them.
EXTRA = {
    "ops_im2col_1thread": "kdp's own im2col path beside oneDNN's convolution",
    "tta_cnn_lightning": "Lightning's fp32 time to 91 % (its bf16-mixed run, the target's peer, stays)",
    "tta_cnn_torch": "PyTorch's fp32 time to 91 % (the fp32-only comparison; the target compares each "
                     "side's best precision, against its bf16 run)",
    **{f"cluster{nodes}n_L_250mbit": "DDP at 3 and 4 nodes on the 250 Mbit/s link (the ring's scaling is "
                                      "checked at 1 Gbit/s; 2 nodes run at both rates)" for nodes in (3, 4)},
    **{f"tta_vit_{side}": "the ViT's time to 88 % at 2x1 against a PyTorch DDP loop, each at its best "
                          "precision (about an hour in all on 2 cores)" for side in VIT_TTA_SIDES},
}
# On a CPU without bf16 units, bf16 products are emulated (PyTorch's bf16
# steps took 3 to 18 times its fp32 ones on AMD Zen 3): the peers' bf16 runs cannot be
# their best there, and their time to 91 % alone would take most of an hour.
# A full run on such a CPU leaves them to --extra and times the fp32 peers to
# 91 % instead (each side at its best precision either way).
WITHOUT_BF16_UNITS = "a bf16 run on a CPU without bf16 units, where fp32 is each side's best"
FP32_PEERS_TO_91 = ("tta_cnn_torch", "tta_cnn_lightning")


def emulated_bf16_run(name):
    """Whether `name` is a run whose bf16 products a CPU without bf16 units
    emulates and whose figure counts only as a side's best precision."""
    return name in ("tta_cnn_kdp_bf16", "tta_cnn_torch_bf16", "tta_cnn_lightning_bf16") or (
        name.startswith("peer_torch_") and name.endswith("_bf16"))


def extra_reason(name, bf16_units):
    """Why a full run leaves `name` to --only and --extra (None: it runs it)."""
    if not bf16_units:
        if emulated_bf16_run(name):
            return WITHOUT_BF16_UNITS
        if name in FP32_PEERS_TO_91:
            return None
    return EXTRA.get(name)


# A run that hangs (a collective whose peer died, say) is stopped and reported;
# the ViT's runs to 88 % train for up to half an hour.
RUN_TIMEOUT_S = 900
LONG_RUN_TIMEOUT_S = {f"tta_vit_{side}": 2700 for side in VIT_TTA_SIDES}
TTA_TARGET = 0.88
CNN_E = ("conv(32,3),relu,conv(64,3),relu,maxpool(2),dropout(0.25),flatten,linear(128),relu,"
         "dropout(0.5),linear(10)")
CNN_TTA_TARGET = 0.91
CNN_TTA_EPOCHS = 8
VIT = "vit(4,64,6,4,128)"
VIT_TTA_EPOCHS = 15
# The targets of kdp against PyTorch (kdp samples/s / PyTorch's), per model
# (and layout where only one has a target).
PEER_TARGETS = {("T", "1x1"): 10.0, "M": 2.0, "L": 1.0, ("H", "1x1"): 2.0, ("E", "1x1"): 1.2,
                ("B", "1x1"): 1.2, ("V", "2x1"): 1.3}
# kdp at its better precision against PyTorch at its better one (fp32 or bf16
# autocast), one process of one thread.
BEST_TARGETS = {"M": 1.3, "L": 1.3, "H": 1.5, "E": 1.3, "B": 1.3, "V": 1.3, "G": 1.3}
# The image models: the CNNs and the vision transformer V.
MLPS, CNNS = ("T", "M", "L"), ("H", "E", "B", "V", "G")  # CNNS: the models timed in ms
# kdp's attention step against PyTorch's SDPA (its time over kdp's).
ATTENTION_TARGET = 1.2


def parse_peer(run, text, peers):
    """Samples/s of kdp's or PyTorch's models in a peer run (the best round counts)."""
    side, layout = run.split("_")[1], run.split("_")[2]
    found = {}  # (side, model): samples/s; side "kdp_bf16" / "torch_bf16" for bf16 steps
    if side == "kdp":
        for m in re.finditer(r"MODEL (\w) step ([\d.]+) [um]s, ([\d.]+) samples/s", text):
            found[("kdp", m[1])] = float(m[3])
        for m in re.finditer(r"MODEL_BF16 (\w) step ([\d.]+) [um]s, ([\d.]+) samples/s", text):
            found[("kdp_bf16", m[1])] = float(m[3])
    else:
        for line in text.splitlines():
            if line.startswith("{"):
                report = json.loads(line)
                peers.setdefault("versions", {})["torch"] = report.get("torch")
                precision = "_bf16" if report.get("precision") == "bf16" else ""
                for name, v in report.get("models", {}).items():
                    found[("torch" + precision, name)] = v["samples_per_s"]
    for (who, name), sps in found.items():
        slot = peers.setdefault(who, {}).setdefault(layout, {})
        slot[name] = max(sps, slot.get(name, 0.0))


def parse_tta(run, text, tta):
    """Training seconds to the target test accuracy (None: not reached) of
    one seed's run (tta_<side>_seed<n>), appended to tta[side]."""
    side = run.split("_")[1]
    seconds = None
    if side == "torch":
        for line in text.splitlines():
            if line.startswith("{"):
                seconds = json.loads(line).get("seconds_to_target")
    else:
        total = 0.0
        for m in re.finditer(r"val_acc ([\d.]+) \([\d.]+ samples/s, ([\d.]+) s\)", text):
            total += float(m[2])
            if float(m[1]) >= TTA_TARGET:
                seconds = total
                break
    tta.setdefault(side, []).append(seconds)


def median_time(times):
    """The median of seeds' times to a target, a seed that never reached it
    counting as slower than any that did (None: most never reached it)."""
    ranked = sorted(times, key=lambda t: float("inf") if t is None else t)
    n = len(ranked)
    if n == 0:
        return None
    middle = ranked[(n - 1) // 2:n // 2 + 1]
    return None if None in middle else sum(middle) / len(middle)


def parse_cnn_tta(run, text, wall_s, tta, versions, target=CNN_TTA_TARGET):
    """Wall seconds from launch to `target` (None: not reached) and the epochs
    it took: the CNN's runs (tta_cnn_*) and the ViT's (tta_vit_*)."""
    side = "_".join(run.split("_")[2:])  # kdp, torch, lightning; _bf16 with bf16 products
    accuracies = []
    if side.startswith("kdp"):
        accuracies = [float(a) for a in re.findall(r"val_acc ([\d.]+) \(", text)]
    else:
        for line in text.splitlines():
            if line.startswith("{"):
                report = json.loads(line)
                accuracies = [e["test_accuracy"] for e in report.get("epochs", [])]
                versions.update({k: report[k] for k in ("torch", "lightning") if k in report})
    reached = next((i + 1 for i, a in enumerate(accuracies) if a >= target), None)
    tta[side] = {"wall_s": wall_s if reached else None, "epochs": reached, "accuracies": accuracies}


def best_wall(runs, *sides):
    """The shortest wall time to the target among `sides` of a model's
    time-to-accuracy runs (None where none reached it)."""
    return min((v for v in (runs.get(s, {}).get("wall_s") for s in sides) if v), default=None)


def best_peer_metrics(peers, metrics):
    """kdp against PyTorch with each side at its better precision, where
    PyTorch's bf16 autocast ran and at 1x1, where it would have (on a CPU
    without bf16 units its fp32 runs alone, its best there)."""
    layouts = set(peers.get("torch_bf16", {})) | ({"1x1"} & set(peers.get("torch", {})))
    for layout in sorted(layouts):
        models = set(peers.get("torch", {}).get(layout, {})) | set(peers.get("torch_bf16", {}).get(layout, {}))
        for model in sorted(models):
            best = lambda sides: max(peers.get(side, {}).get(layout, {}).get(model, 0.0)  # noqa: E731
                                     for side in sides)
            mine, theirs = best(("kdp", "kdp_bf16")), best(("torch", "torch_bf16"))
            if mine > 0 and theirs > 0:
                target = BEST_TARGETS.get(model) if layout == "1x1" else None
                metrics[f"kdp_vs_torch_best_{model}_{layout}"] = {
                    "value": mine / theirs, "target": target, "better": "higher" if target else "info"}


def cnn_tta_metrics(cnn_tta, metrics):
    """The CNN's wall seconds to 91 % per run; kdp against PyTorch's and
    Lightning's fp32 runs, and each side at its best precision; the accuracy
    bf16 costs kdp after 3 epochs."""
    for side, v in cnn_tta.items():
        metrics[f"time_to_91_cnn_{side}_s"] = {
            "value": float("nan") if v["wall_s"] is None else v["wall_s"], "target": None, "better": "info"}
    mine = cnn_tta.get("kdp", {}).get("wall_s")
    for peer, target in (("torch", 0.8), ("lightning", None)):
        theirs = cnn_tta.get(peer, {}).get("wall_s")
        if mine and theirs:
            metrics[f"kdp_vs_{peer}_time_to_91_cnn"] = {
                "value": mine / theirs, "target": target, "better": "lower" if target else "info"}
    # Each side at its best precision: the faster of its runs (bf16 where the
    # CPU has bf16 units, fp32 where the suite timed only that).
    mine = best_wall(cnn_tta, "kdp", "kdp_bf16")
    for peer in ("torch", "lightning"):
        theirs = best_wall(cnn_tta, peer, f"{peer}_bf16")
        if mine and theirs:
            metrics[f"kdp_vs_{peer}_best_time_to_91_cnn"] = {"value": mine / theirs, "target": 0.7,
                                                             "better": "lower"}
    acc = {s: (cnn_tta.get(s, {}).get("accuracies") or [None])[:3] for s in ("kdp", "kdp_bf16")}
    if len(acc["kdp"]) == 3 and len(acc["kdp_bf16"]) == 3 and None not in acc["kdp"] + acc["kdp_bf16"]:
        metrics["cnn_bf16_accuracy_points_lost_epoch_3"] = {
            "value": 100 * (acc["kdp"][2] - acc["kdp_bf16"][2]), "target": 0.3, "better": "lower"}


def vit_tta_metrics(vit_tta, metrics):
    """The ViT's wall seconds to 88 % per run, and kdp's best against
    PyTorch's best (the faster precision of each side that ran)."""
    for side, v in vit_tta.items():
        metrics[f"time_to_88_vit_{side}_s"] = {
            "value": float("nan") if v["wall_s"] is None else v["wall_s"], "target": None, "better": "info"}
    mine, theirs = best_wall(vit_tta, "kdp", "kdp_bf16"), best_wall(vit_tta, "torch", "torch_bf16")
    if mine and theirs:
        metrics["kdp_vs_torch_best_time_to_88_vit_2x1"] = {"value": mine / theirs, "target": 0.7,
                                                           "better": "lower"}


def tta_table(runs):
    """A report's table of the time-to-accuracy runs of one model."""
    lines = ["| run | wall time | epochs | test accuracy per epoch |", "|---|---|---|---|"]
    for side, label in (("kdp", "kdp-train"), ("torch", "PyTorch loop"), ("lightning", "Lightning Trainer"),
                        ("kdp_bf16", "kdp-train --precision bf16"),
                        ("torch_bf16", "PyTorch loop, bf16 autocast"),
                        ("lightning_bf16", 'Lightning Trainer, precision="bf16-mixed"')):
        v = runs.get(side)
        if v:
            wall = "not reached" if v["wall_s"] is None else f"{v['wall_s']:.1f} s"
            lines.append(f"| {label} | {wall} | {v['epochs'] or ''} | "
                         f"{', '.join(f'{a:.4f}' for a in v['accuracies'])} |")
    return lines


def suffix(run):
    return "_1_thread" if run.endswith("1thread") else ""


PATTERNS = [
    # RATIO <label> <value>  (target >= <t>: met|MISSED)
    (re.compile(r"RATIO (.+?)\s+(-?[\d.]+)\s+\(target >= ([\d.]+)"),
     lambda m, run: (slug(m[1]) + suffix(run), float(m[2]), float(m[3]), "higher")),
    (re.compile(r"(ZERO|REPRODUCIBLE) (\S+) ([\d.]+) \(target <= ([\d.]+)\)"),
     lambda m, run: (f"{m[1].lower()}_{m[2]}", float(m[3]), float(m[4]), "lower")),
    (re.compile(r"REPRODUCIBLE (\S+) ([\d.]+) *$", re.M),
     lambda m, run: (f"reproducible_{m[1]}", float(m[2]), None, "info")),
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
    (re.compile(r"OVERLAP (\S+) step / max\(compute, comm\): ([\d.]+)"),
     lambda m, run: (f"ddp_overlap_vs_ideal_{m[1]}", float(m[2]), 1.15, "lower")),
    (re.compile(r"DEPBOUND (\S+) step / dependency bound [\d.]+ ms: ([\d.]+)"),
     lambda m, run: (f"ddp_step_vs_dependency_bound_{m[1]}", float(m[2]), None, "info")),
    (re.compile(r"INFO  rank 0 sent ([\d.]+) MB to other nodes"),
     lambda m, run: (f"ddp_rank0_network_mb_{run}", float(m[1]), None, "info")),
    (re.compile(r"kdp-train: test_accuracy=([\d.]+) .*wall_time_s=([\d.]+)"),
     lambda m, run: (f"{run}_test_accuracy", float(m[1]), None, "info") if run.startswith("cluster_accuracy")
     else None),
    (re.compile(r"communication: ([\d.]+) MB over the network"),
     lambda m, run: (f"{run}_network_mb", float(m[1]), None, "info")),
    (re.compile(r"SAMPLES_PER_S ([\d.]+)"),
     lambda m, run: (f"ddp_samples_per_s_{run}", float(m[1]), None, "info")),
    (re.compile(r"WAIT\s+share of .*?: ([\d.]+) %"),
     lambda m, run: (f"loader_wait_share{suffix(run)}", float(m[1]) / 100.0, 0.02, "lower")),
    (re.compile(r"SHARE (.+?)\s+(-?[\d.]+)\s*$", re.M),
     lambda m, run: (slug(m[1]) + suffix(run), float(m[2]), None, "info")),
    (re.compile(r"MEMORY attention( bf16)? peak T=(\d+) / T=(\d+) ([\d.]+) \(target <= ([\d.]+)\)"),
     lambda m, run: (f"attention{'_bf16' if m[1] else ''}_peak_memory_T{m[2]}_vs_T{m[3]}", float(m[4]),
                     float(m[5]), "lower")),
    (re.compile(r"INFO  (\w) bf16 vs fp32 step at (\w+): ([\d.]+)x"),
     lambda m, run: (f"model_{m[1]}_bf16_vs_fp32_{m[2]}", float(m[3]), None, "info")),
    (re.compile(r"MODEL (\w) step ([\d.]+) ([um]s), ([\d.]+) samples/s, ([\d.]+) GFLOP/s, ([\d.]+) %"),
     None),  # handled below: several figures per line
]


def parse(run, text, metrics, models):
    for pattern, make in PATTERNS:
        for m in pattern.finditer(text):
            if make is None:
                layout = run.split("_", 1)[1]
                name, sps, gflops, pct = m[1], float(m[4]), float(m[5]), float(m[6])
                step_us = float(m[2]) * (1000.0 if m[3] == "ms" else 1.0)
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
            made = make(m, run)
            if made is None:  # the pattern does not apply to this run
                continue
            key, value, target, better = made
            metrics[key] = {"value": value, "target": target, "better": better}


def attention_ratios(logs, metrics):
    """kdp's attention step against PyTorch's SDPA at each shape, PyTorch's
    time over kdp's (higher is better): precision by precision (fp32 against
    fp32, bf16 against bf16) and each at its better precision ("best")."""
    times = {}
    for run in ("attention", "attention_torch"):
        for m in re.finditer(r"ATTENTION (kdp|torch) T=(\d+) (full|causal) (fp32|bf16) fwd\+bwd ([\d.]+) ms",
                             logs.get(run, "")):
            times[(m[1], int(m[2]), m[3], m[4])] = float(m[5])
    shapes = sorted({(t, mask) for (_, t, mask, _) in times})
    for t, mask in shapes:
        for precision in ("fp32", "bf16"):
            mine, theirs = times.get(("kdp", t, mask, precision)), times.get(("torch", t, mask, precision))
            if mine and theirs:
                metrics[f"kdp_vs_torch_attention_T{t}_{mask}_{precision}"] = {
                    "value": theirs / mine, "target": ATTENTION_TARGET, "better": "higher"}
        mine = [times[k] for k in (("kdp", t, mask, "fp32"), ("kdp", t, mask, "bf16")) if k in times]
        theirs = [times[k] for k in (("torch", t, mask, "fp32"), ("torch", t, mask, "bf16")) if k in times]
        if len(mine) == 2 and len(theirs) == 2:
            metrics[f"kdp_vs_torch_best_attention_T{t}_{mask}"] = {
                "value": min(theirs) / min(mine), "target": ATTENTION_TARGET, "better": "higher"}


def round_trip(build, ms):
    """A cache line's round trip between the first two CPUs in ns
    (kdp_core_round_trip), or None (one CPU, the program not built)."""
    program = os.path.join(build, "perf", "kdp_core_round_trip")
    if not os.path.exists(program):
        return None
    try:
        out = subprocess.run([program, "--ms", str(ms)], capture_output=True, text=True, timeout=30).stdout
    except subprocess.TimeoutExpired:
        return None
    m = re.search(r"ROUND_TRIP ([\d.]+) ns", out)
    return float(m[1]) if m else None


# A round trip that changes by more than this during a run: the host moved the
# CPUs (docs/performance.md, "Two speeds on machine D").
MOVED = 2.0


def moved_runs(round_trips):
    """The runs during which the round trip between the first two CPUs changed
    by more than MOVED times: their figures may compare two placements."""
    return [name for name, (before, after) in round_trips.items()
            if before and after and max(before, after) > MOVED * min(before, after)]


def far_runs(round_trips):
    """The runs with the first two CPUs apart throughout: both round trips
    more than MOVED times the fastest of the whole run (none where the host
    never moved them). Their figures of two threads or ranks may compare
    another placement than the baseline's."""
    trips = [t for pair in round_trips.values() for t in pair if t]
    if not trips:
        return []
    fastest = min(trips)
    return [name for name, (before, after) in round_trips.items()
            if before and after and min(before, after) > MOVED * fastest]


def placement_note(round_trips):
    moved, far = moved_runs(round_trips), far_runs(round_trips)
    note = ""
    if moved:
        note += (f" The host moved the first two CPUs apart or together during {len(moved)} run(s) (a "
                 f"cache line's round trip between them changed more than {MOVED:g}x), whose figures may "
                 f"compare two placements: {', '.join(moved)}.")
    if far:
        note += (f" The first two CPUs were apart throughout {len(far)} run(s) (a round trip more than "
                 f"{MOVED:g}x the run's fastest), whose figures of two threads or ranks may be their "
                 f"slower placement's: {', '.join(far)}.")
    return note


def time_spent(wall, suite_s, longest=5):
    """The report's line on the run's length: minutes in all and the runs
    that took longest, for a user who reruns a part with --only."""
    top = sorted(wall.items(), key=lambda kv: -kv[1])[:longest]
    return (f"The run took {suite_s / 60:.1f} min; the longest runs: "
            + ", ".join(f"{name} {seconds / 60:.1f} min" for name, seconds in top) + ".")


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
            names = [n for n in MLPS + CNNS if n in models]
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
    names = [n for n in MLPS + CNNS if any(n in peers["torch"][l] for l in layouts)]
    fig, ax = plt.subplots(figsize=(9, 4))
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


BASELINES = os.path.join(HERE, "baselines")


def this_machine(logs):
    """The machine kind of this run: CPU model, cores, the Kokkos backend the
    benchmarks printed."""
    backend = next((m[1] for text in logs.values() for m in [re.search(r"^backend: (\w+)", text, re.M)]
                    if m), "unknown")
    cpu, cores = baselines.cpu_model(), len(os.sched_getaffinity(0))
    return {"key": baselines.machine_key(cpu, cores, backend), "cpu": cpu, "cores": cores,
            "backend": backend}


def baseline_from(path, result_files):
    result = json.load(open(result_files[0]))
    machine = result.get("machine")
    if machine is None:
        sys.exit(f"{result_files[0]} does not say which machine it ran on (an older results.json)")
    path = path or os.path.join(BASELINES, machine["key"] + ".json")
    baselines.from_results(path, result_files)
    print(f"baseline of {machine['key']} written from {len(result_files)} runs: {path}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build")
    ap.add_argument("--out", default=None)
    ap.add_argument("--baseline", default=None,
                    help="the baseline file (default: perf/baselines/<this machine's key>.json)")
    ap.add_argument("--tolerance", type=float, default=0.25,
                    help="relative: how far below the lowest (above the highest) recorded value")
    ap.add_argument("--absolute-tolerance", type=float, default=0.02,
                    help="for figures near zero (shares of time): how far beyond the recorded spread")
    ap.add_argument("--update-baseline", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a few iterations of each (checks the suite runs)")
    ap.add_argument("--peer-python", default="/usr/bin/python3",
                    help="the interpreter with PyTorch (and Lightning) the peers run with")
    ap.add_argument("--only", metavar="REGEX", nargs="+", default=None,
                    help="run only the runs whose name matches one of these (e.g. 'peer_' ops_); "
                         "no baseline is recorded")
    ap.add_argument("--extra", action="store_true",
                    help="also the runs a full run leaves out (information only: " + ", ".join(EXTRA) + ")")
    ap.add_argument("--list", action="store_true", help="list the runs' names (after --only) and exit")
    ap.add_argument("--baseline-from", nargs="+", metavar="RESULTS",
                    help="write the baseline of these results.json files' machine from them")
    args = ap.parse_args()
    if args.baseline_from:
        return baseline_from(args.baseline, args.baseline_from)
    if not args.build:
        ap.error("--build is required to run the suite")

    build = os.path.abspath(args.build)
    try:
        only = re.compile("|".join(f"(?:{r})" for r in args.only)) if args.only else None
    except re.error as e:
        ap.error(f"--only {' '.join(args.only)}: not a regular expression ({e})")
    units = baselines.bf16_units()
    chosen = lambda name: (only.search(name) if only  # noqa: E731
                           else args.extra or extra_reason(name, units) is None)
    runs = with_data([r for r in benchmarks(build, args.quick, args.peer_python) if chosen(r[0])], build)
    if args.list:
        print("\n".join(name + (f"  (extra: {extra_reason(name, units)})" if extra_reason(name, units) else "")
                        for name, _, _ in runs))
        return 0
    if not runs:
        print(f"no run matches --only {' '.join(args.only)} (--list shows their names)")
        return 2
    stamp = datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    out = args.out or os.path.join(HERE, "results", stamp)
    os.makedirs(out, exist_ok=True)
    metrics, models, logs, failures, skipped, wall, retried = {}, {}, {}, [], [], {}, []
    round_trips = {}  # run: [ns before, ns after]
    trip_ms = 50 if args.quick else 100  # thousands of round trips
    peers, tta, cnn_tta, vit_tta, versions = {}, {}, {}, {}, {}
    suite_start = time.monotonic()
    for name, cmd, env in runs:
        timeout_s = LONG_RUN_TIMEOUT_S.get(name, RUN_TIMEOUT_S)
        why = runnable(cmd, build)
        if why is None and name != IMPORT and needs_data(cmd) and not os.path.exists(DATA):
            why = CannotRun(f"no {DATA} (its import did not run or failed)")
        if why:
            print(f"== {name}: NOT RUN: {why}", flush=True)
            (skipped if isinstance(why, NotHere) else failures).append(f"{name} not run: {why}")
            continue
        shown = " ".join(f"{k}={v}" for k, v in env.items())
        print(f"== {name}: {shown + ' ' if shown else ''}{' '.join(cmd)}", flush=True)
        if name == IMPORT:
            os.makedirs(os.path.dirname(DATA), exist_ok=True)
        before = round_trip(build, trip_ms)
        try:
            launched = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env},
                                  timeout=timeout_s)
            if proc.returncode not in (0, 3) and cmd[0] == args.peer_python:
                # A peer's own failure (its DDP processes over gloo, say) gets
                # one more try; kdp's runs get none.
                print(f"   the peer exited with {proc.returncode}: once more", flush=True)
                retried.append(f"{name} (exit {proc.returncode} the first time)")
                proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env},
                                      timeout=timeout_s)
            wall_s = wall[name] = time.monotonic() - launched
        except subprocess.TimeoutExpired as e:
            failures.append(f"{name} did not finish within {timeout_s} s")
            print(f"   {name}: stopped after {timeout_s} s", flush=True)
            logs[name] = uncoloured((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
                               else (e.stdout or ""))
            wall[name] = timeout_s
            continue
        round_trips[name] = [before, round_trip(build, trip_ms)]
        print(f"   {wall_s:.1f} s" + ("  (the round trip between the first two CPUs went from "
                                    f"{round_trips[name][0]:.0f} to {round_trips[name][1]:.0f} ns)"
                                    if moved_runs({name: round_trips[name]}) else ""), flush=True)
        text = uncoloured(proc.stdout + proc.stderr)
        logs[name] = text
        with open(os.path.join(out, f"{name}.log"), "w") as f:
            f.write(text)
        missing = re.search(r"(PyTorch|Lightning) is not installed[^\"]*", text)
        if proc.returncode == 3 and missing:
            print(f"   skipped: {missing[0]}", flush=True)
            skipped.append(f"{name}: {missing[0]} (for {args.peer_python})")
            continue
        if proc.returncode != 0:
            failures.append(f"{name} exited with {proc.returncode}")
            print(text[-2000:])
            continue
        if name.startswith("peer_"):
            parse_peer(name, text, peers)
        elif name.startswith("tta_cnn_"):
            parse_cnn_tta(name, text, wall_s, cnn_tta, versions)
        elif name.startswith("tta_vit_"):
            parse_cnn_tta(name, text, wall_s, vit_tta, versions, target=TTA_TARGET)
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
    best_peer_metrics(peers, metrics)
    medians = {side: median_time(times) for side, times in tta.items()}
    for side in ("kdp", "torch"):
        if side in medians:
            metrics[f"time_to_88_{side}_s"] = {
                "value": float("nan") if medians[side] is None else medians[side], "target": None,
                "better": "info"}
    if medians.get("kdp") and medians.get("torch"):
        # kdp-train's default mode against the current PyTorch (0.5 was the
        # target against PyTorch 1.13, whose epochs took several times as long).
        metrics["kdp_vs_torch_time_to_88"] = {"value": medians["kdp"] / medians["torch"],
                                              "target": 0.7, "better": "lower"}
    cnn_tta_metrics(cnn_tta, metrics)
    vit_tta_metrics(vit_tta, metrics)
    attention_ratios(logs, metrics)
    # The convolution paths per layer and precision (the faster one is what a
    # build with oneDNN should take: docs/performance.md).
    convs = {}
    for run in ("ops_1thread", "ops_im2col_1thread"):
        for m in re.finditer(r"CONV (.+?) fwd\+bwd on (\S+): fp32 ([\d.]+) GFLOP/s, bf16 ([\d.]+) GFLOP/s",
                             logs.get(run, "")):
            convs[(m[1], m[2])] = (float(m[3]), float(m[4]))
    for (layer, path), (f32, b16) in sorted(convs.items()):
        if path != "oneDNN" or (layer, "im2col") not in convs:
            continue
        for i, precision in enumerate(("fp32", "bf16")):
            metrics[f"conv_{slug(layer)}_onednn_vs_im2col_{precision}"] = {
                "value": (f32, b16)[i] / convs[(layer, "im2col")][i], "target": None, "better": "info"}
    versions.update({k: v for k, v in peers.pop("versions", {}).items() if v})
    s1 = metrics.get("ddp_samples_per_s_ddp_r1", {}).get("value")
    s2 = metrics.get("ddp_samples_per_s_ddp_r2", {}).get("value")
    if s1 and s2:
        metrics["ddp_scaling_efficiency_L_1_to_2_ranks"] = {"value": s2 / (2 * s1), "target": 0.9, "better": "higher"}
    # Each hook's accuracy after 10 epochs against the float32 allreduce's.
    plain = metrics.get("cluster_accuracy_allreduce_test_accuracy", {}).get("value")
    for hook in HOOK_NAMES[1:]:
        acc = metrics.get(f"cluster_accuracy_{hook}_test_accuracy", {}).get("value")
        if plain is not None and acc is not None:
            metrics[f"hook_accuracy_points_lost_{hook}"] = {
                "value": 100 * (plain - acc), "target": 0.3, "better": "lower"}
    # On the emulated cluster: 2 nodes x 1 rank against one rank of one thread.
    for key, e in list(metrics.items()):
        m = re.fullmatch(r"ddp_samples_per_s_cluster_([LD])_(\w+)", key)
        single = metrics.get("ddp_samples_per_s_ddp_r1" + ("_D" if m and m[1] == "D" else ""), {}).get("value")
        if m and single:
            metrics[f"ddp_scaling_efficiency_{m[1]}_{m[2]}_2_nodes"] = {
                "value": e["value"] / (2 * single), "target": None, "better": "info"}
    best = {}
    for name, layouts in models.items():
        layout = max(layouts, key=lambda l: layouts[l]["samples_per_s"])
        best[name] = {"layout": layout, **layouts[layout]}

    machine = this_machine(logs)
    known = machine["backend"] != "unknown" or args.baseline is not None
    if not known and any(name.startswith(("models_", "peer_kdp_")) for name in logs):
        failures.append("the benchmarks' logs name no Kokkos backend ('backend: ...'): the machine kind "
                        "is unknown, so no baseline was compared or recorded")
    baseline_path = args.baseline or os.path.join(BASELINES, machine["key"] + ".json")
    baseline = baselines.load(baseline_path) if known and os.path.exists(baseline_path) else None
    regressions = baselines.compare(metrics, baseline, args.tolerance, args.absolute_tolerance)

    result = {"timestamp": stamp, "host": platform.node(), "cpus": os.cpu_count(), "machine": machine,
              "baseline": baseline_path if baseline else None,
              "metrics": metrics, "models": models, "best_layouts": best, "peers": peers,
              "time_to_88": tta, "time_to_91_cnn": cnn_tta,
              "time_to_88_vit": vit_tta, "peer_versions": versions,
              "regressions": regressions, "failures": failures, "skipped": skipped, "retried": retried,
              "tolerance": args.tolerance, "wall_s": wall, "suite_s": time.monotonic() - suite_start,
              "round_trip_ns": round_trips, "moved_runs": moved_runs(round_trips),
              "far_runs": far_runs(round_trips)}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
    pictures = charts(out, models, metrics) + peer_chart(out, peers)

    lines = [f"# kdp performance report ({stamp})", "",
             f"Host {platform.node()}: {machine['cpu']}, {machine['cores']} cores, Kokkos "
             f"{machine['backend']}. Every figure is a ratio against a reference measured in the same "
             f"run unless its name ends in _us or says samples/s. Baseline: "
             + (f"{os.path.relpath(baseline_path, HERE)} ({baseline['runs']} run(s)); a regression is a "
                f"figure beyond its recorded spread by {args.tolerance:.0%} (figures near zero: by "
                f"{args.absolute_tolerance:g})" if baseline
                else "none for this machine yet" if known else "none: the machine kind is unknown")
             + ". Peers: "
             + (", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "none ran")
             + f" ({args.peer_python}). " + time_spent(wall, result["suite_s"])
             + placement_note(round_trips), "",
             "| metric | value | target | met | baseline |", "|---|---|---|---|---|"]
    for key, e in sorted(metrics.items()):
        ok = met(e)
        lines.append(f"| {key} | {e['value']:.4g} | {'' if e['target'] is None else e['target']} | "
                     f"{'' if ok is None else ('yes' if ok else 'NO')} | "
                     f"{'' if e.get('baseline') is None else format(e['baseline'], '.4g')} |")
    lines += ["", "## Reference models by layout (ranks x devices per rank)", "",
              "| model | layout | step (us) | samples/s | GFLOP/s | roofline |", "|---|---|---|---|---|---|"]
    for name in MLPS + CNNS:
        for layout, v in sorted(models.get(name, {}).items()):
            mark = " (best)" if best.get(name, {}).get("layout") == layout else ""
            lines.append(f"| {name} | {layout}{mark} | {v['step_us']:.1f} | {v['samples_per_s']:.0f} | "
                         f"{v['gflops']:.1f} | {100 * v['roofline']:.1f} % |")
    if peers.get("torch_bf16"):
        lines += ["", "## Each at its best precision, one process of one thread (samples/s)", "",
                  "| model | kdp fp32 | kdp bf16 | PyTorch fp32 | PyTorch bf16 autocast | best / best |",
                  "|---|---|---|---|---|---|"]
        for name in MLPS + CNNS:
            row = [peers.get(side, {}).get("1x1", {}).get(name) for side in ("kdp", "kdp_bf16", "torch", "torch_bf16")]
            if all(row):
                lines.append(f"| {name} | " + " | ".join(f"{v:.0f}" for v in row)
                             + f" | {max(row[:2]) / max(row[2:]):.2f} |")
    if peers.get("torch"):
        lines += ["", "## Side by side with PyTorch (processes x threads)", "",
                  "| model | layout | kdp samples/s | PyTorch samples/s | kdp / PyTorch |",
                  "|---|---|---|---|---|"]
        for name in MLPS + CNNS:
            for layout in ("1x1", "1xN", "2x1"):
                mine = peers.get("kdp", {}).get(layout, {}).get(name)
                theirs = peers["torch"].get(layout, {}).get(name)
                if mine and theirs:
                    lines.append(f"| {name} | {layout} | {mine:.0f} | {theirs:.0f} | {mine / theirs:.2f} |")
    if tta:
        def shown(side):
            if side not in tta:
                return "not run"
            each = ", ".join("not reached" if v is None else f"{v:.1f}" for v in tta[side])
            m = median_time(tta[side])
            return f"{'not reached' if m is None else f'{m:.1f} s'} (seeds: {each})"
        lines += ["", f"Time to {TTA_TARGET:.0%} test accuracy on Fashion-MNIST (training time, "
                      f"784-256-256-10, Adam 1e-3, batch 128; the median over seeds): "
                      f"kdp {shown('kdp')}, PyTorch {shown('torch')}."]
    if cnn_tta:
        lines += ["", f"Time to {CNN_TTA_TARGET:.0%} test accuracy with the pytorch/examples CNN (E) on "
                      f"Fashion-MNIST, wall time from launch, two data-parallel processes of one thread "
                      f"(Adadelta 1.0, StepLR 0.7, global batch 64, at most {CNN_TTA_EPOCHS} epochs):", ""]
        lines += tta_table(cnn_tta)
    if vit_tta:
        lines += ["", f"Time to {TTA_TARGET:.0%} test accuracy with the ViT {VIT} on Fashion-MNIST, wall "
                      f"time from launch, two data-parallel processes of one thread (AdamW 1e-3, cosine "
                      f"schedule, global batch 128, at most {VIT_TTA_EPOCHS} epochs):", ""]
        lines += tta_table(vit_tta)
    lines += [""] + [f"![{os.path.basename(p)}]({os.path.basename(p)})" for p in pictures]
    if regressions:
        lines += ["", "## Regressions", ""] + [f"- {r}" for r in regressions]
    if failures:
        lines += ["", "## Failures", ""] + [f"- {r}" for r in failures]
    if skipped:
        lines += ["", "## Not run here", ""] + [f"- {r}" for r in skipped]
    if retried:
        lines += ["", "## Peers that failed once and ran again", ""] + [f"- {r}" for r in retried]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

    print("\n".join(lines[6:]))
    for name, b in best.items():
        print(f"best layout for {name}: {b['layout']} ({b['samples_per_s']:.0f} samples/s)")
    print(f"\nresults: {os.path.join(out, 'results.json')}\nreport:  {os.path.join(out, 'report.md')}")
    if args.only and (baseline is None or args.update_baseline):
        print("partial run (--only): not recorded as a baseline")
    elif args.quick and (baseline is None or args.update_baseline):
        print("quick run: its figures are too rough to record as a baseline")
    elif not known:
        print("the machine kind is unknown: no baseline compared or recorded")
    elif baseline is None or args.update_baseline:
        if failures:
            print("FAILURES (no baseline recorded):\n  " + "\n  ".join(failures))
            return 1
        recorded = baselines.record(baseline_path, machine, metrics, stamp, existing=baseline)
        what = "first run on this machine kind: recorded as its baseline" if baseline is None else \
            f"added to the baseline ({recorded['runs']} runs)"
        print(f"{what}: {baseline_path}")
        return 0
    if regressions:
        print("REGRESSIONS (beyond the tolerance):\n  " + "\n  ".join(regressions))
    if skipped:
        print("NOT RUN on this machine:\n  " + "\n  ".join(skipped))
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
    return 1 if regressions or failures else 0


if __name__ == "__main__":
    sys.exit(main())
