#!/usr/bin/env bash
# Installs kdp to a temporary prefix, then builds examples/ as a project of its
# own against it (find_package(kdp CONFIG)) and runs one example.
#
#   install_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d /tmp/kdp-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
drivers=()
[[ -x $build/tools/kdp-train ]] && drivers=(bin/kdp-train bin/kdp-data)
for f in lib/cmake/kdp/kdpConfig.cmake lib/cmake/kdp/kdpConfigVersion.cmake include/kdp/kdp.hpp \
         include/kdp/version.hpp include/kdp/config.hpp include/kdp/core/execution_context.hpp \
         include/kdp/exact/one_pass.hpp "${drivers[@]}"; do
  [[ -e $work/prefix/$f ]] || { echo "FAIL: $f was not installed"; exit 1; }
done
# kdp's private headers stay private.
for f in include/kdp/io/hdf5.hpp include/kdp/core/tensor_kernels.hpp include/kdp/core/parallel_for.hpp \
         include/kdp/kernels/native/small_gemm.hpp include/kdp/kernels/product_policy.hpp \
         include/kdp/exact/shard_products.hpp include/kdp/autograd/accumulate_grad.hpp; do
  [[ ! -e $work/prefix/$f ]] || { echo "FAIL: the private header $f was installed"; exit 1; }
done
# The examples are a C++-only project (no C compiler enabled), as a user's may be.
grep -q "LANGUAGES CXX)" "$src/examples/CMakeLists.txt" ||
  { echo "FAIL: the consumer project is not C++-only"; exit 1; }
cmake -S "$src/examples" -B "$work/examples" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; echo "FAIL: configuring the examples against the install"; exit 1; }
cmake --build "$work/examples" --target example_02_custom_loss -j 2 >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log"; echo "FAIL: building an example against the install"; exit 1; }
# A user of kdp compiles none of HDF5's headers.
if grep -rq "hdf5" "$work/examples/CMakeFiles/example_02_custom_loss.dir/flags.make"; then
  echo "FAIL: HDF5's include path reached a user of kdp"; exit 1
fi
out=$("$work/examples/02_custom_loss" 1)
grep -q "step 200  loss" <<<"$out" || { echo "$out"; echo "FAIL: the example did not run"; exit 1; }
if [[ ${#drivers[@]} -gt 0 ]]; then
  "$work/prefix/bin/kdp-train" --help | grep -q -- "--checkpoint-dir" || { echo "FAIL: installed kdp-train"; exit 1; }
fi
echo "ok: installed, found with find_package(kdp CONFIG), an example built and ran"
