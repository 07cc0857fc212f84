#!/usr/bin/env bash
# scripts/lint.sh and scripts/function-lengths.py find what they must: a tree
# with one of each finding fails naming each place, the same tree mended
# passes, and the counter gives known bodies their lengths (a template, a
# constructor with braced initializers, a lambda outside a function, braces in
# strings, characters and comments).
#
#   lint_check.sh REPO_ROOT
set -uo pipefail
repo=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
mkdir -p "$work/tree/src/ops" "$work/tree/tools" "$work/tree/examples"

# body N: a function body of N lines (the braces' lines included).
body() {
  echo "{"
  for ((i = 2; i < $1; ++i)); do echo "  ++x;"; done
  echo "}"
}
{
  echo 'namespace kdp::ops {'
  echo 'void hand_typed(int n) {'
  echo '  KDP_CHECK_FOR("kdp::ops::relu", n > 0, ValueError, "n {}", n);'
  echo '  KDP_FAIL_FOR('
  echo '      "kdp::ops::relu" , ValueError, "never");'
  echo '}'
  echo 'void standard() { throw std::runtime_error("no"); }'
  echo 'bool hooked() { return std::getenv("KDP_TEST_SLOW") != nullptr; }'
  echo 'template <class T>'
  echo 'int long_template(T x)'
  body 81
  echo '}  // namespace kdp::ops'
} >"$work/tree/src/ops/bad.cpp"
out=$("$repo/scripts/lint.sh" "$work/tree" 2>&1)
[[ $? -eq 1 ]] || fail "the lint passed a tree with findings: $out"
for want in "src/ops/bad.cpp:3" "src/ops/bad.cpp:4" "src/ops/bad.cpp:7:" "src/ops/bad.cpp:8:" \
  "81 src/ops/bad.cpp:11 long_template"; do
  grep -qF "$want" <<<"$out" || fail "the lint did not report $want: $out"
done

{
  echo 'namespace kdp::ops {'
  echo 'void derived(int n) { KDP_CHECK(n > 0, ValueError, "n {}", n); }'
  echo 'void passed_on(const std::string& op) { KDP_FAIL_FOR(op, ValueError, "never"); }'
  echo 'int long_enough(int x)'
  body 80
  echo '}  // namespace kdp::ops'
} >"$work/tree/src/ops/bad.cpp"
mkdir -p "$work/tree/src/train"
echo 'bool hooked() { return std::getenv("KDP_TEST_SLOW") != nullptr; }' >"$work/tree/src/train/test_seam.cpp"
out=$("$repo/scripts/lint.sh" "$work/tree" 2>&1) || fail "the lint refused a mended tree: $out"

# The counter's lengths, by kind of body.
{
  echo 'struct Widget {'
  echo '  Widget(int a) : a_{a}, b_(a) '
  body 5
  echo '  int inline_method() const '
  body 4
  echo '  int a_, b_;'
  echo '};'
  echo 'const auto lambda = [](int y) '
  body 6
  echo ';'
  echo 'char quoted() {'
  echo '  const char* s = "{{{";  // }}'
  echo "  return '{';"
  echo '  /* } */'
  echo '}'
  echo 'int with_lambda_inside() {'
  echo '  auto f = [&] { return 1; };'
  echo '  if (f()) { return 2; }'
  echo '  return 0;'
  echo '}'
  echo 'static int table[] = {1, 2, 3};'
} >"$work/kinds.cpp"
got=$(/usr/bin/python3 "$repo/scripts/function-lengths.py" --top 10 "$work/kinds.cpp" | sed "s|$work/||" | sort)
want=$(printf '%s\n' "5 kinds.cpp:3 Widget" "4 kinds.cpp:9 inline_method" "6 kinds.cpp:16 lambda" \
  "5 kinds.cpp:23 quoted" "5 kinds.cpp:28 with_lambda_inside" | sort)
[[ $got == "$want" ]] || fail "function-lengths counted
$got
where it must count
$want"
echo "ok: the lint reports hand-typed origins, standard exceptions, test hooks outside the seam and long functions, passes the mended tree; the counter measures each kind of body"
