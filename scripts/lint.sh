#!/usr/bin/env bash
# kdp's own rules that no compiler checks, over src/ and tools/ (CI runs it):
#  - errors: a check's origin is derived, never typed by hand (no "kdp::..."
#    literal as KDP_CHECK_FOR's or KDP_FAIL_FOR's origin: KDP_CHECK, an
#    origin passed down, or KDP_ORIGIN_NAMED); src/ throws kdp's errors only
#    (no `throw std::...`: a caller catches kdp::Error and its kinds);
#  - tests' hooks: the KDP_TEST_* variables are read in src/train/test_seam.*
#    alone (one test-only seam, nothing else in the library or the tools);
#  - length: no function body over 80 lines, templates and lambdas included
#    (scripts/function-lengths.py says how it counts).
# Prints each finding as path:line and exits 1 if there is one.
#
#   scripts/lint.sh [TREE]     TREE: the tree to check (default: this repository)
set -uo pipefail
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "${1:-$scripts/..}" || exit 2
status=0

# A check's origin typed by hand, also where the macro's arguments start on
# the next line.
origins=$(/usr/bin/python3 - src tools <<'PY'
import os, re, sys
pattern = re.compile(r'KDP_(CHECK|FAIL)_FOR\(\s*"kdp::')
for top in sys.argv[1:]:
    for root, _, names in os.walk(top):
        for name in sorted(names):
            if not name.endswith((".cpp", ".hpp", ".inc", ".h")):
                continue
            path = os.path.join(root, name)
            text = open(path, encoding="utf-8", errors="replace").read()
            for m in pattern.finditer(text):
                print(f"{path}:{text.count(chr(10), 0, m.start()) + 1}")
PY
)
if [[ -n $origins ]]; then
  echo "lint: a check's origin typed by hand (use KDP_CHECK, pass the caller's origin, or KDP_ORIGIN_NAMED):"
  echo "$origins"
  status=1
fi

throws=$(grep -rnE --include='*.cpp' --include='*.hpp' --include='*.inc' 'throw[[:space:]]+std::' src 2>/dev/null)
if [[ -n $throws ]]; then
  echo "lint: src/ throws a standard exception where a kdp::Error belongs (core/check.hpp's KDP_CHECK or KDP_FAIL):"
  echo "$throws"
  status=1
fi

hooks=$(grep -rnE --include='*.cpp' --include='*.hpp' --include='*.inc' 'KDP_TEST_' src tools 2>/dev/null |
  grep -vE '^src/train/test_seam\.(cpp|hpp):')
if [[ -n $hooks ]]; then
  echo "lint: a test hook outside the test seam (src/train/test_seam.hpp reads every KDP_TEST_* variable):"
  echo "$hooks"
  status=1
fi

if ! /usr/bin/python3 "$scripts/function-lengths.py" --limit 80 src tools examples; then
  echo "lint: functions over 80 lines: make their steps functions with names a reader can follow"
  status=1
fi

((status == 0)) && echo "lint: ok (origins, standard exceptions, test hooks, function lengths)"
exit $status
