"""Per-machine baselines of kdp's performance suite, and the comparison of a
run with them.

A baseline belongs to a kind of machine: its key is the CPU model, the cores
the suite may use and the Kokkos backend (perf/baselines/<key>.json), so a run
is never compared with figures of another CPU. A baseline keeps the last runs'
values of every comparable figure (dimensionless ratios, not absolute times)
and compares a new run with their spread:

  - a figure where higher is better regressed when it is below the lowest
    recorded value by more than the tolerance (relative); one where lower is
    better when it is above the highest by more than the tolerance;
  - figures near zero (shares of time, fractions hidden) are compared in
    absolute terms: a wait share of 0.006 against 0.004 is no regression, one
    of 0.05 is (more than the absolute tolerance above the highest).

A machine without a baseline of its key gets one from its first run, and the
suite says so instead of comparing.
"""
import datetime
import json
import os
import platform
import re
import statistics

# Values kept per figure: enough for a spread, few enough to follow a machine
# that changes (a new BLAS, a kernel update).
KEEP_RUNS = 7
# Figures compared in absolute terms: fractions of time whose typical value
# is a few percent, where a relative tolerance would flag noise.
NEAR_ZERO = 0.1


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name as the kernel reports it (x86-64: "model name" with
    its family and model numbers, as names such as "Intel(R) Xeon(R)
    Processor" cover CPUs of different generations; POWER: "cpu"; Arm:
    implementer and part numbers), else the architecture."""
    fields = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() not in fields:
                    fields[key.strip().lower()] = value.strip()
    except OSError:
        pass
    if fields.get("model name"):
        numbers = ""
        if fields.get("cpu family") and fields.get("model"):
            numbers = f" (family {fields['cpu family']} model {fields['model']})"
        return fields["model name"] + numbers
    for key in ("cpu model", "cpu"):
        if fields.get(key):
            return fields[key]
    if "cpu part" in fields:
        return f"arm {fields.get('cpu implementer', '')} {fields['cpu part']}".strip()
    return platform.processor() or platform.machine() or "unknown"


def bf16_units(cpuinfo="/proc/cpuinfo"):
    """Whether the CPU multiplies bf16 in hardware: AVX512_BF16 or AMX-BF16 on
    x86-64, BF16 on Arm (True where the kernel does not say)."""
    flags = set()
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() in ("flags", "features"):
                    flags.update(value.split())
    except OSError:
        return True
    return not flags or bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_key(cpu, cores, backend):
    """perf/baselines/<key>.json: the CPU model, the cores, the backend."""
    return f"{slug(cpu)}-{cores}c-{slug(backend or 'unknown')}"


def is_absolute(name, values):
    """Whether a figure is compared in absolute terms (near zero)."""
    return "share" in name or "hidden" in name or max(abs(v) for v in values) < NEAR_ZERO


def comparable(key, better):
    """Only dimensionless figures with a direction are compared across runs;
    absolute times and rates depend on the machine's load."""
    return better in ("higher", "lower") and not key.endswith("_us")


def load(path):
    with open(path) as f:
        return json.load(f)


def summarize(runs, better):
    """min/median/max of each figure over `runs` (lists of values)."""
    out = {}
    for name, values in runs.items():
        values = values[-KEEP_RUNS:]
        out[name] = {"min": min(values), "median": statistics.median(values), "max": max(values),
                     "better": better[name], "absolute": is_absolute(name, values),
                     "values": values}
    return out


def record(path, machine, metrics, note, existing=None):
    """Adds one run's comparable figures to the baseline at `path` (created
    when absent) and writes it. `metrics`: name -> {"value", "better"}."""
    runs = {}
    better = {}
    if existing:
        for name, entry in existing.get("metrics", {}).items():
            runs[name] = list(entry.get("values", [entry.get("median")]))
            better[name] = entry["better"]
    for name, entry in metrics.items():
        if not comparable(name, entry["better"]) or entry["value"] != entry["value"]:  # NaN
            continue
        runs.setdefault(name, []).append(entry["value"])
        better[name] = entry["better"]
    baseline = {"key": machine["key"], "cpu": machine["cpu"], "cores": machine["cores"],
                "backend": machine["backend"],
                "runs": (existing or {}).get("runs", 0) + 1,
                "updated": note or datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ"),
                "metrics": summarize(runs, better)}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(baseline, f, indent=2, sort_keys=True)
        f.write("\n")
    return baseline


def from_results(path, result_files):
    """A baseline made from several results.json files of one machine kind."""
    results = [load(p) for p in result_files]
    keys = {r.get("machine", {}).get("key") for r in results}
    if len(keys) != 1 or None in keys:
        raise ValueError(f"the results come from machines {sorted(map(str, keys))}: a baseline "
                         f"belongs to one kind of machine")
    baseline = None
    for r in results:
        baseline = record(path, r["machine"], r["metrics"],
                          f"from {len(results)} runs", existing=baseline)
    return baseline


def compare(metrics, baseline, tolerance, absolute_tolerance):
    """Regressions of a run against a baseline, as sentences; each metric's
    entry gains "baseline" (the recorded median) for the report."""
    regressions = []
    recorded = (baseline or {}).get("metrics", {})
    for name, entry in sorted(metrics.items()):
        base = recorded.get(name)
        entry["baseline"] = None if base is None else base["median"]
        if base is None or not comparable(name, entry["better"]):
            continue
        value = entry["value"]
        if value != value:  # NaN: not measured this time
            continue
        lo, hi = base["min"], base["max"]
        if base["absolute"]:
            if entry["better"] == "higher" and value < lo - absolute_tolerance:
                regressions.append(f"{name}: {value:.4g} < lowest recorded {lo:.4g} - "
                                   f"{absolute_tolerance:g} (absolute)")
            if entry["better"] == "lower" and value > hi + absolute_tolerance:
                regressions.append(f"{name}: {value:.4g} > highest recorded {hi:.4g} + "
                                   f"{absolute_tolerance:g} (absolute)")
            continue
        # The tolerance is a share of the recorded value's size: a figure
        # below zero (accuracy points lost, when a hook gained some) widens
        # its spread outwards too.
        if entry["better"] == "higher" and value < lo - tolerance * abs(lo):
            regressions.append(f"{name}: {value:.4g} < lowest recorded {lo:.4g} - {tolerance:.0%}")
        if entry["better"] == "lower" and value > hi + tolerance * abs(hi):
            regressions.append(f"{name}: {value:.4g} > highest recorded {hi:.4g} + {tolerance:.0%}")
    return regressions
