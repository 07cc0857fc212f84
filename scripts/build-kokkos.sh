#!/usr/bin/env bash
# Builds Kokkos and Kokkos Kernels from their source trees and installs them
# where kdp finds them (-DCMAKE_PREFIX_PATH=PREFIX):
#
#   scripts/build-kokkos.sh --backend openmp|cuda --src KOKKOS_DIR \
#       --kernels-src KOKKOS_KERNELS_DIR --prefix DIR [--arch HOPPER90] [--jobs N]
#
# The sources are the release tarballs (github.com/kokkos/kokkos/releases and
# github.com/kokkos/kokkos-kernels/releases, unpacked) or checkouts of their
# tags; Spack does all of this by itself (spack install kdp +cuda cuda_arch=90).
# kdp is tested with Kokkos and Kokkos Kernels 4.6.01. CUDA 13 changed two
# runtime calls Kokkos makes; Kokkos 4.7.01 and newer know it, and a 4.6.x
# tree gets the same changes from scripts/patches/kokkos-4.6-cuda13.patch,
# applied here to a copy of the tree (the given one is not modified). Older
# trees are refused before anything is built.
#
#   openmp: Serial + OpenMP, Kokkos Kernels with the host BLAS (OpenBLAS).
#   cuda:   CUDA (+ Serial for the host) for --arch (HOPPER90: H100/H200),
#           lambdas, through Kokkos' nvcc_wrapper; Kokkos Kernels with the
#           cuBLAS TPL (and the host BLAS for Serial).
# Both: Kokkos Kernels' BLAS component only, float and LayoutRight instantiated.
#
# What is installed already (same backend, architecture and source versions,
# recorded in PREFIX/share/kdp-build-kokkos.txt) is skipped.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

backend= src= kernels_src= prefix= arch=HOPPER90 jobs=$(nproc)
usage() {
  sed -n '2,6p' "$0" >&2
  exit 2
}
while (($# > 0)); do
  case $1 in
  --backend) backend=$2; shift 2 ;;
  --src) src=$2; shift 2 ;;
  --kernels-src) kernels_src=$2; shift 2 ;;
  --prefix) prefix=$2; shift 2 ;;
  --arch) arch=$2; shift 2 ;;
  --jobs) jobs=$2; shift 2 ;;
  -h | --help) usage ;;
  *) echo "build-kokkos.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ $backend == openmp || $backend == cuda ]] || { echo "build-kokkos.sh: --backend must be openmp or cuda (got '$backend')" >&2; exit 2; }
for d in "$src" "$kernels_src"; do
  [[ -n $d && -f $d/CMakeLists.txt ]] || { echo "build-kokkos.sh: '$d' is not a source tree (no CMakeLists.txt)" >&2; exit 2; }
done
[[ -n $prefix ]] || { echo "build-kokkos.sh: --prefix is required" >&2; exit 2; }
src=$(cd "$src" && pwd)
kernels_src=$(cd "$kernels_src" && pwd)
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

# The version a source tree declares in its CMakeLists.txt (4.6.1 -> 40601).
version_of() {  # DIR PACKAGE
  local file=$1/CMakeLists.txt major minor patch
  major=$(sed -nE "s/.*set\(($2)_VERSION_MAJOR ([0-9]+)\).*/\2/Ip" "$file" | head -1)
  minor=$(sed -nE "s/.*set\(($2)_VERSION_MINOR ([0-9]+)\).*/\2/Ip" "$file" | head -1)
  patch=$(sed -nE "s/.*set\(($2)_VERSION_PATCH ([0-9]+)\).*/\2/Ip" "$file" | head -1)
  echo $((major * 10000 + minor * 100 + patch))
}
kokkos_version=$(version_of "$src" Kokkos)
kernels_version=$(version_of "$kernels_src" KokkosKernels)
pretty() { echo "$(($1 / 10000)).$(printf %02d $(($1 / 100 % 100))).$(printf %02d $(($1 % 100)))"; }
echo "Kokkos $(pretty "$kokkos_version") from $src"
echo "Kokkos Kernels $(pretty "$kernels_version") from $kernels_src"

stamp=$prefix/share/kdp-build-kokkos.txt
want="backend=$backend arch=$arch kokkos=$kokkos_version kernels=$kernels_version"
if [[ -f $stamp && $(cat "$stamp") == "$want" && -f $prefix/lib/cmake/KokkosKernels/KokkosKernelsConfig.cmake ]]; then
  echo "Kokkos and Kokkos Kernels ($want) are installed in $prefix already"
  exit 0
fi

cmake_common=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF
              -DBUILD_SHARED_LIBS=ON)
kokkos_args=(-DKokkos_ENABLE_SERIAL=ON)
kernels_args=(-DKokkosKernels_ENABLE_ALL_COMPONENTS=OFF -DKokkosKernels_ENABLE_COMPONENT_BLAS=ON
              -DKokkosKernels_INST_FLOAT=ON -DKokkosKernels_INST_DOUBLE=OFF
              -DKokkosKernels_INST_LAYOUTRIGHT=ON -DKokkosKernels_INST_LAYOUTLEFT=OFF
              -DKokkosKernels_ENABLE_TPL_BLAS=ON -DKokkosKernels_ENABLE_TESTS=OFF
              -DKokkosKernels_ENABLE_PERFTESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF)
if [[ $backend == openmp ]]; then
  kokkos_args+=(-DKokkos_ENABLE_OPENMP=ON -DCMAKE_CXX_COMPILER=g++)
  kernels_args+=(-DCMAKE_CXX_COMPILER=g++)
else
  command -v nvcc >/dev/null || { echo "build-kokkos.sh: nvcc is not on PATH" >&2; exit 1; }
  nvcc_version=$(nvcc --version | sed -nE 's/.*release ([0-9]+)\.([0-9]+).*/\1\2/p')
  echo "nvcc $(nvcc --version | sed -nE 's/.*release ([0-9.]+).*/\1/p')"
  # CUDA 13 changed cudaMemAdvise and cudaMemPrefetchAsync; Kokkos releases
  # before 4.7.01 call the old forms and do not compile. 4.6.x gets the change.
  if ((nvcc_version >= 130)) && ! grep -rqs "CUDART_VERSION >= 13000" "$src/core/src/Cuda"; then
    if ((kokkos_version / 100 != 406)); then
      echo "build-kokkos.sh: Kokkos $(pretty "$kokkos_version") does not build with CUDA 13's runtime API; use 4.6.x (patched here) or 4.7.01 and newer" >&2
      exit 1
    fi
    patched=$prefix/build/kokkos-src-cuda13
    rm -rf "$patched" && mkdir -p "$(dirname "$patched")" && cp -a "$src" "$patched"
    patch -d "$patched" -p1 --forward --quiet <"$root/scripts/patches/kokkos-4.6-cuda13.patch" ||
      { echo "build-kokkos.sh: scripts/patches/kokkos-4.6-cuda13.patch does not apply to $src" >&2; exit 1; }
    src=$patched
    echo "CUDA 13: applied scripts/patches/kokkos-4.6-cuda13.patch to a copy of the Kokkos sources"
  fi
  # nvcc 13 no longer knows sm_70, nvcc_wrapper's default before 4.7.01 for
  # compiles that name no architecture (CMake's compiler checks): name it.
  sm=$(sed -nE 's/^HOPPER90$/90/p; s/^ADA89$/89/p; s/^AMPERE80$/80/p; s/^AMPERE86$/86/p; s/^BLACKWELL100$/100/p' <<<"$arch")
  [[ -n $sm ]] || { echo "build-kokkos.sh: unknown --arch '$arch' (HOPPER90, ADA89, AMPERE80, AMPERE86, BLACKWELL100)" >&2; exit 2; }
  cmake_common+=("-DCMAKE_CXX_FLAGS=-arch=sm_$sm")
  kokkos_args+=(-DKokkos_ENABLE_CUDA=ON "-DKokkos_ARCH_$arch=ON" -DKokkos_ENABLE_CUDA_LAMBDA=ON
                "-DCMAKE_CXX_COMPILER=$src/bin/nvcc_wrapper")
  kernels_args+=(-DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF
                 -DKokkosKernels_ENABLE_TPL_CUSOLVER=OFF -DKokkosKernels_INST_MEMSPACE_CUDAUVMSPACE=OFF
                 "-DCMAKE_CXX_COMPILER=$src/bin/nvcc_wrapper")
fi


work=$prefix/build
start=$SECONDS
cmake -S "$src" -B "$work/kokkos" "${cmake_common[@]}" "${kokkos_args[@]}" \
  -DCMAKE_INSTALL_PREFIX="$prefix" >"$work.kokkos-configure.log" 2>&1 ||
  { tail -30 "$work.kokkos-configure.log"; exit 1; }
cmake --build "$work/kokkos" -j "$jobs" >"$work.kokkos-build.log" 2>&1 ||
  { grep -E "error|Error" "$work.kokkos-build.log" | head -30; exit 1; }
cmake --install "$work/kokkos" >/dev/null
echo "Kokkos installed in $((SECONDS - start)) s"

start=$SECONDS
cmake -S "$kernels_src" -B "$work/kernels" "${cmake_common[@]}" "${kernels_args[@]}" \
  -DKokkos_ROOT="$prefix" -DCMAKE_INSTALL_PREFIX="$prefix" >"$work.kernels-configure.log" 2>&1 ||
  { tail -30 "$work.kernels-configure.log"; exit 1; }
cmake --build "$work/kernels" -j "$jobs" >"$work.kernels-build.log" 2>&1 ||
  { grep -E "error|Error" "$work.kernels-build.log" | head -30; exit 1; }
cmake --install "$work/kernels" >/dev/null
echo "Kokkos Kernels installed in $((SECONDS - start)) s"
mkdir -p "$(dirname "$stamp")"
echo "$want" >"$stamp"
echo "installed in $prefix"
