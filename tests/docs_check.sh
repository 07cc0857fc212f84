#!/usr/bin/env bash
# The API reference builds, and Doxygen reports no public class or struct
# without documentation.
#
#   docs_check.sh BUILD_DIR
set -u
build=$1
cmake --build "$build" --target docs >/dev/null 2>&1 || { echo "FAIL: the docs target"; exit 1; }
missing=$(grep -E "Compound .* is not documented" "$build/docs/warnings.txt")
if [[ -n $missing ]]; then
  echo "FAIL: undocumented public classes:"
  echo "$missing"
  exit 1
fi
echo "ok: $(ls "$build"/docs/html/class*.html 2>/dev/null | wc -l) classes documented"
