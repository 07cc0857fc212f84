#!/usr/bin/env bash
# kdp-train on a CPU where OpenBLAS falls back to generic kernels (a release
# older than the CPU) restarts itself with OPENBLAS_CORETYPE naming the CPU's
# own, says so in its header, and trains with them, on one rank and on two;
# a user's own OPENBLAS_CORETYPE is kept (the advice line, no restart). Where
# OpenBLAS chose well (or the BLAS is another), kdp-train prints no BLAS line
# and the test is skipped (77): nothing here can make OpenBLAS choose badly.
#
#   blas_restart.sh TOOLS_DIR TESTS_SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
# shellcheck source=../reliability/common.sh
source "$src/reliability/common.sh"
make_tiny_data
cd "$work" || fail "work directory"
train=("$bin/kdp-train" --data "$work/tiny.h5" --model 784,32,10 --batch-size 40 --threads 1
       --seed 5 --progress lines --epochs 1 --max-steps 2)
env -u OPENBLAS_CORETYPE -u KDP_OPENBLAS_FALLBACK timeout 120 "${train[@]}" >one.log 2>&1 ||
  { cat one.log; fail "the run without OPENBLAS_CORETYPE"; }
line=$(grep '^kdp-train: the BLAS (OpenBLAS)' one.log)
if [[ -z $line ]]; then
  echo "SKIP: OpenBLAS chose this CPU's own kernels (or the BLAS is not OpenBLAS)"
  exit 77
fi
[[ $line =~ runs\ its\ ([A-Za-z0-9]+)\ kernels\ \(OPENBLAS_CORETYPE=([A-Za-z0-9]+),\ set\ at\ start:\ it\ took\ its\ generic\ ([A-Za-z0-9]+)\ kernels ]] ||
  fail "kdp-train did not restart with the CPU's kernels: $line"
in_use=${BASH_REMATCH[1]} chosen=${BASH_REMATCH[2]} generic=${BASH_REMATCH[3]}
[[ ${in_use,,} == "${chosen,,}" ]] || fail "it set $chosen but OpenBLAS runs $in_use"
[[ ${in_use,,} != "${generic,,}" ]] || fail "the generic $generic kernels again"
grep -q 'test_accuracy=' one.log || { cat one.log; fail "the restarted run did not finish"; }
[[ $(grep -c '^kdp-train: .*rank(s) x' one.log) -eq 1 ]] || { cat one.log; fail "two headers"; }

# Two ranks under mpirun: each restarts before MPI starts.
env -u OPENBLAS_CORETYPE -u KDP_OPENBLAS_FALLBACK timeout 120 mpirun "${mpi_flags[@]}" -np 2 \
  "${train[@]}" >two.log 2>&1 || { cat two.log; fail "the run on 2 ranks"; }
grep -q "runs its $in_use kernels" two.log || { cat two.log; fail "2 ranks: no restart"; }
grep -q 'ranks=2' two.log || { cat two.log; fail "2 ranks: the run did not finish"; }

# The user's choice stands, however poor: the advice, no restart.
OPENBLAS_CORETYPE=$generic timeout 120 "${train[@]}" >own.log 2>&1 ||
  { cat own.log; fail "the run with the user's OPENBLAS_CORETYPE"; }
grep -q "took its generic $generic kernels .*export OPENBLAS_CORETYPE=$chosen" own.log ||
  { cat own.log; fail "the user's OPENBLAS_CORETYPE was not kept with the advice"; }
echo "ok: kdp-train restarts with OPENBLAS_CORETYPE=$chosen where OpenBLAS took $generic"
