#!/usr/bin/env bash
# Every measurement of docs/benchmarks.md's "one engine" section, in one
# go, with the counts used there. Output (tables, JSON, traces' summaries)
# goes to $BENCH_OUT (default ./bench-out-DATE). Needs root; takes about
# 50 minutes on the 2-core machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export BENCH_OUT=${BENCH_OUT:-$PWD/bench-out-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$BENCH_OUT"
run() { echo; echo "######## $* (load $(cut -d' ' -f1-3 /proc/loadavg))"; "$@"; }
{
	run "$here/run-true.sh" 300
	run "$here/starts.sh" 300
	run "$here/exec.sh" 300
	run "$here/env-cycle.sh" 150
	run "$here/concurrent.sh" 12
	run "$here/tails.sh" 300
	run "$here/pipe.sh" 10
	run "$here/durability.sh" 40
	run "$here/phases.sh" 40
	run "$here/phases-perf.sh" 60
	run "$here/memory.sh" 10
	run "$here/gobench.sh" 'launch|stop|listing'
	run "$here/scale.sh" 10000 20
	run "$here/growth.sh" 30
} 2>&1 | tee "$BENCH_OUT/all.log"
