#!/usr/bin/env bash
# A benchmark's output read through a pipe (as perf/run_suite.py reads it) has
# no terminal colour codes, even where TERM names a colour terminal.
#
#   plain_logs.sh BENCHMARK
set -uo pipefail
log=$(TERM=xterm "$1" --benchmark_min_time=0.001 '--benchmark_filter=Tiny' 2>&1) ||
  { echo "$log"; echo "plain_logs: $1 failed"; exit 1; }
grep -q "^TinyStep/T" <<<"$log" || { echo "$log"; echo "plain_logs: no TinyStep row at a line's start"; exit 1; }
if grep -q $'\x1b' <<<"$log"; then
  cat -v <<<"$log"
  echo "plain_logs: escape codes in a piped benchmark log"
  exit 1
fi
echo "plain_logs: $(wc -l <<<"$log") lines, no escape code"
