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
for f in lib/cmake/kdp/kdpConfig.cmake lib/cmake/kdp/kdpConfigVersion.cmake include/kdp/kdp.hpp \
         include/kdp/version.hpp include/kdp/config.hpp bin/kdp-train bin/kdp-data; do
  [[ -e $work/prefix/$f ]] || { echo "FAIL: $f was not installed"; exit 1; }
done
cmake -S "$src/examples" -B "$work/examples" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; echo "FAIL: configuring the examples against the install"; exit 1; }
cmake --build "$work/examples" --target example_02_custom_loss -j 2 >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log"; echo "FAIL: building an example against the install"; exit 1; }
out=$("$work/examples/02_custom_loss" 1)
grep -q "step 200  loss" <<<"$out" || { echo "$out"; echo "FAIL: the example did not run"; exit 1; }
"$work/prefix/bin/kdp-train" --help | grep -q -- "--checkpoint-dir" || { echo "FAIL: installed kdp-train"; exit 1; }
echo "ok: installed, found with find_package(kdp CONFIG), an example built and ran"
