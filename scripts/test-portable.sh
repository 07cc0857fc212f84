#!/usr/bin/env bash
# kdp as a CPU other than x86-64 builds it, checked on any machine:
#  1. the library and its unit tests built with KDP_ENABLE_X86_KERNELS=OFF
#     (the portable code an aarch64 or ppc64le build takes instead of kdp's
#     AVX2 kernels) in build-portable/, and the unit tests run. This build is
#     also the smallest kdp, without MPI and HDF5 (what scripts/gpu-check.sh
#     builds on a GPU node, and spack's ~mpi ~hdf5): its suites of the
#     parallel, data and distributed layers (one process) run too;
#  2. every source file of the library compiled for aarch64 with Debian's
#     cross-compiler (g++-aarch64-linux-gnu), against the same Kokkos, HDF5
#     and MPI headers: objects only, nothing links or runs. Warnings are
#     errors, an unused constant among them: the branch compiled here is the
#     one nvcc's pass compiles (KDP_X86_KERNELS, src/core/cpu_isa.hpp), and
#     nvcc reports such a constant (scripts/check-cuda-build.sh fails on it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-packages.sh" "$root/scripts/packages.txt" "$root/scripts/test-packages.txt"
build=${KDP_PORTABLE_BUILD_DIR:-$root/build-portable}
jobs=$(nproc)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKDP_ENABLE_X86_KERNELS=OFF \
  -DKDP_ENABLE_MPI=OFF -DKDP_ENABLE_HDF5=OFF \
  -DKDP_ENABLE_EXAMPLES=OFF -DKDP_ENABLE_TOOLS=OFF -DKDP_ENABLE_PERF=OFF >/dev/null
# The suites of the layers the x86 kernels serve (GEMMs and what runs on them),
# and those a build without MPI and HDF5 has beside them.
suites=(kdp_tests_core kdp_tests_kernels kdp_tests_autograd kdp_tests_ops kdp_tests_nn kdp_tests_optim
        kdp_tests_parallel kdp_tests_data kdp_tests_dist)
cmake --build "$build" -j "$jobs" --target "${suites[@]}"
for suite in "${suites[@]}"; do
  "$build/tests/$suite" --gtest_brief=1 || { echo "test-portable: $suite failed"; exit 1; }
done

cross=aarch64-linux-gnu-g++
if ! command -v "$cross" >/dev/null; then
  echo "test-portable: $cross is not installed; the aarch64 compile is skipped"
  exit 0
fi
out=$build/aarch64
mkdir -p "$out"
flags=(-std=c++17 -O1 -Wall -Wextra -Wunused-const-variable=1 -Werror -DFMT_SHARED -I"$root/include" -I"$build/include"
       -I"$root/src")
# The build's own include paths for Kokkos, and HDF5's and MPI's (headers
# only; the build above uses neither).
while read -r dir; do flags+=(-isystem "$dir"); done < <(
  { sed -nE 's/^CXX_INCLUDES = //p' "$build/src/CMakeFiles/kdp.dir/flags.make"
    pkg-config --cflags-only-I hdf5 ompi-cxx; } | tr ' ' '\n' | sed -nE 's/^(-I)?(\/usr\/.*)$/\2/p')
export cross out
export flags_text="${flags[*]}"
start=$SECONDS
find "$root/src" -name '*.cpp' | sort | xargs -P "$jobs" -I{} sh -c \
  'f={}; o=$out/$(echo "${f#'"$root"'/src/}" | tr / _).o; $cross $flags_text -c "$f" -o "$o" || { echo "aarch64: $f does not compile"; exit 255; }'
echo "test-portable: $(find "$out" -name '*.o' | wc -l) sources compiled for aarch64 in $((SECONDS - start)) s"
