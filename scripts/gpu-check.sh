#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and nothing prepared (nvcc,
# CMake and python3; no network, no MPI, no HDF5 headers): builds Kokkos and
# Kokkos Kernels for CUDA, builds kdp (MPI and HDF5 off), runs the whole CTest
# suite but the Slurm test, checks mixed precision on its own (autocast's
# products through cuBLAS's bf16 GEMM with fp32 compute, against the fp32
# product of the rounded operands), runs the performance suite (--quick) and
# the models in full in fp32 and bf16, and writes every log and results.json
# under --out.
#
#   scripts/gpu-check.sh --out DIR [--kokkos-src D --kernels-src D] [--arch HOPPER90]
#                        [--jobs N] [--work DIR] [--build-only]
#   scripts/gpu-check.sh --pack --kokkos-src D --kernels-src D
#
# Sources: --kokkos-src/--kernels-src, else $KDP_KOKKOS_SRC/$KDP_KOKKOS_KERNELS_SRC,
# else .gpu-deps/kokkos and .gpu-deps/kokkos-kernels. --pack, run on a machine
# set up by scripts/setup.sh, copies those sources and the libraries the GPU
# machine may lack (fmt, GoogleTest, Google Benchmark, CLI11) into .gpu-deps/
# (ignored by git), for a tool that carries ignored folders to that machine;
# where nvcc is installed it also builds Kokkos and Kokkos Kernels for CUDA
# there (.gpu-deps/kokkos-cuda, with scripts/build-kokkos.sh, which patches a
# 4.6.x tree for CUDA 13), so the GPU machine spends none of its minutes on it.
# --build-only stops after the builds: the part a machine without a GPU can do.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=$root/.gpu-deps
out= kokkos_src=${KDP_KOKKOS_SRC:-} kernels_src=${KDP_KOKKOS_KERNELS_SRC:-} arch=HOPPER90
jobs=$(nproc) work=${TMPDIR:-/tmp}/kdp-gpu-check build_only=0 pack=0
while (($# > 0)); do
  case $1 in
  --out) out=$2; shift 2 ;;
  --kokkos-src) kokkos_src=$2; shift 2 ;;
  --kernels-src) kernels_src=$2; shift 2 ;;
  --arch) arch=$2; shift 2 ;;
  --jobs) jobs=$2; shift 2 ;;
  --work) work=$2; shift 2 ;;
  --build-only) build_only=1; shift ;;
  --pack) pack=1; shift ;;
  *) echo "gpu-check: unknown argument '$1'" >&2; sed -n '2,20p' "$0" >&2; exit 2 ;;
  esac
done
[[ -z $kokkos_src && -d $deps/kokkos ]] && kokkos_src=$deps/kokkos
[[ -z $kernels_src && -d $deps/kokkos-kernels ]] && kernels_src=$deps/kokkos-kernels

if ((pack)); then
  [[ -f $kokkos_src/CMakeLists.txt && -f $kernels_src/CMakeLists.txt ]] ||
    { echo "gpu-check --pack: give --kokkos-src and --kernels-src source trees" >&2; exit 2; }
  rm -rf "$deps" && mkdir -p "$deps/prefix"
  cp -a "$kokkos_src" "$deps/kokkos" && rm -rf "$deps/kokkos/.git"
  cp -a "$kernels_src" "$deps/kokkos-kernels" && rm -rf "$deps/kokkos-kernels/.git"
  for pkg in libfmt-dev libfmt9 libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian libcli11-dev; do
    dpkg-query -L "$pkg" 2>/dev/null | while read -r f; do
      [[ -f $f && $f == /usr/* && $f != /usr/share/doc/* && $f != /usr/src/* ]] || continue
      rel=${f#/usr/}
      mkdir -p "$deps/prefix/$(dirname "$rel")" && cp -a "$f" "$deps/prefix/$rel"
    done
  done
  if command -v nvcc >/dev/null; then
    "$root/scripts/build-kokkos.sh" --backend cuda --arch "$arch" --jobs "$jobs" \
      --src "$deps/kokkos" --kernels-src "$deps/kokkos-kernels" --prefix "$deps/kokkos-cuda" || exit 1
    rm -rf "$deps/kokkos-cuda/build"  # the build tree: only the install travels
  else
    echo "gpu-check --pack: no nvcc here; the GPU machine builds Kokkos for CUDA itself"
  fi
  echo "packed into $deps ($(du -sh "$deps" | cut -f1)); carry .gpu-deps to the GPU machine"
  exit 0
fi

[[ -n $out ]] || { echo "gpu-check: --out DIR is required" >&2; exit 2; }
mkdir -p "$out/logs" "$work"
out=$(cd "$out" && pwd)
summary=$out/steps.txt
: >"$summary"
check_start=$SECONDS

step() {  # step NAME COMMAND...: runs it with its log in $out/logs/NAME.log, times it
  local name=$1 start=$SECONDS status
  shift
  echo "== $name: $*"
  "$@" >"$out/logs/$name.log" 2>&1
  status=$?
  echo "$name $status $((SECONDS - start))" >>"$summary"
  echo "   $name: exit $status after $((SECONDS - start)) s"
  tail -3 "$out/logs/$name.log" | sed 's/^/   | /'
  return $status
}

{
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1
  cmake --version 2>&1 | head -1
  echo "cores: $(nproc)"
} >"$out/machine.txt"

prefix=$work/kokkos-cuda
# Built by --pack on a CPU machine: used as it is (build-kokkos.sh finds its
# stamp and builds nothing).
[[ -f $deps/kokkos-cuda/share/kdp-build-kokkos.txt ]] && prefix=$deps/kokkos-cuda
# Packed packages keep Debian's layout; their CMake files are named directly,
# since another system need not search lib/x86_64-linux-gnu.
packed=()
for config in "$deps"/prefix/lib/*/cmake/{fmt,GTest,benchmark} "$deps"/prefix/share/cmake/CLI11; do
  [[ -d $config ]] && packed+=("-D$(basename "$config")_DIR=$config")
done
step build-kokkos "$root/scripts/build-kokkos.sh" --backend cuda --arch "$arch" --jobs "$jobs" \
  --src "$kokkos_src" --kernels-src "$kernels_src" --prefix "$prefix" || exit 1
sm=$(sed -nE 's/^HOPPER90$/90/p; s/^ADA89$/89/p; s/^AMPERE80$/80/p; s/^AMPERE86$/86/p; s/^BLACKWELL100$/100/p' <<<"$arch")
build=$work/build
step configure cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_PREFIX_PATH=$prefix" "-DCMAKE_CXX_COMPILER=$prefix/bin/nvcc_wrapper" \
  "-DCMAKE_CXX_FLAGS=-arch=sm_$sm" -DKDP_ENABLE_MPI=OFF -DKDP_ENABLE_HDF5=OFF "${packed[@]}" || exit 1
step build cmake --build "$build" -j "$jobs" || exit 1
if ((build_only)); then
  echo "gpu-check: built in $((SECONDS - check_start)) s; --build-only: nothing run"
  exit 0
fi

step ctest ctest --test-dir "$build" --output-on-failure -j 8 -LE "slurm|cuda-build"
tests_status=$?
step bf16 "$build/tests/kdp_tests_ops" "--gtest_filter=Autocast.*"
((tests_status == 0)) && tests_status=$?
step perf-quick /usr/bin/python3 "$root/perf/run_suite.py" --build "$build" --quick \
  --out "$out/perf-quick" --baseline /nonexistent.json
step models "$build/perf/kdp_bench_models" "--benchmark_filter=roofline|step/"
step models-2devices "$build/perf/kdp_bench_models" --kdp_devices=2 \
  "--benchmark_filter=roofline|step/"

/usr/bin/python3 - "$out" "$summary" "$((SECONDS - check_start))" <<'PY'
import json, os, re, sys
out, summary, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
steps = {}
for line in open(summary):
    name, status, seconds = line.split()
    steps[name] = {"exit": int(status), "seconds": int(seconds)}
def log(name):
    path = os.path.join(out, "logs", name + ".log")
    return open(path, errors="replace").read() if os.path.exists(path) else ""
tests = {}
m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", log("ctest"))
if m:
    tests = {"passed": int(m[3]) - int(m[2]), "failed": int(m[2]), "total": int(m[3]),
             "failed_names": re.findall(r"^\s+\d+ - (\S+) \(Failed", log("ctest"), re.M)}
models = {}
for run in ("models", "models-2devices"):
    text = log(run)
    roof = re.search(r"roofline ([\d.]+) GFLOP/s", text)
    for m in re.finditer(r"MODEL (\w) step ([\d.]+) us, ([\d.]+) samples/s, ([\d.]+) GFLOP/s, "
                         r"([\d.]+) %", text):
        models.setdefault(run, {})[m[1]] = {"step_us": float(m[2]), "samples_per_s": float(m[3]),
                                            "gflops": float(m[4]), "roofline": float(m[5]) / 100}
    for m in re.finditer(r"MODEL_BF16 (\w) step ([\d.]+) (us|ms), ([\d.]+) samples/s", text):
        fp32 = models.get(run, {}).get(m[1], {})
        step_us = float(m[2]) * (1000.0 if m[3] == "ms" else 1.0)
        models.setdefault(run, {})[m[1] + "_bf16"] = {
            "step_us": step_us, "samples_per_s": float(m[4]),
            "vs_fp32": fp32["step_us"] / step_us if fp32 else None}
    if roof:
        models.setdefault(run, {})["sgemm_1024_gflops"] = float(roof[1])
quick = {}
qpath = os.path.join(out, "perf-quick", "results.json")
if os.path.exists(qpath):
    quick = json.load(open(qpath))
machine = open(os.path.join(out, "machine.txt")).read()
gpu = re.search(r"\|\s+\d+\s+(NVIDIA[^|]*?)\s{2,}", machine)
result = {"gpu": gpu[1].strip() if gpu else None, "seconds": total, "steps": steps,
          "tests": tests, "models": models, "perf_quick": quick.get("models", {}),
          "perf_quick_metrics": quick.get("metrics", {})}
json.dump(result, open(os.path.join(out, "results.json"), "w"), indent=2)
print(json.dumps({k: result[k] for k in ("gpu", "seconds", "tests")}, indent=2))
for run, figures in models.items():
    for name, f in figures.items():
        print(run, name, f)
PY
echo "gpu-check: $((SECONDS - check_start)) s; results in $out/results.json"
exit $tests_status
