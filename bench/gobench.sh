#!/usr/bin/env bash
# The Go benchmarks behind docs/benchmarks.md, with the iteration counts
# used there. Each prints its medians as metrics and a spread line (with
# the load average) from b.Log. Needs root.
#
# usage: bench/gobench.sh [PATTERN]   (default: all of them)
#
# Output goes to stdout and, if $BENCH_OUT is set, to $BENCH_OUT/go-*.txt.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
pattern=${1:-.}
out=${BENCH_OUT:-}
# run NAME PKG BENCH BENCHTIME [K=V | go test flag]...
run() {
	local name=$1 pkg=$2 bench=$3 benchtime=$4
	shift 4
	local vars=() flags=()
	for a in "$@"; do
		if [[ $a == *=* && $a != -* ]]; then vars+=("$a"); else flags+=("$a"); fi
	done
	if ! [[ $name =~ $pattern ]]; then
		return
	fi
	echo "== $name (load $(cut -d' ' -f1-3 /proc/loadavg))"
	env ${vars[@]+"${vars[@]}"} go test -run '^$' -bench "$bench" -benchtime "$benchtime" -timeout 120m ${flags[@]+"${flags[@]}"} "$pkg" |
		if [ -n "$out" ]; then tee "$out/go-$name.txt"; else cat; fi
}
# issue 2
run launch . '^BenchmarkLaunch$' 200x
run concurrent . '^BenchmarkConcurrentSleep$' 5x
run memory . '^BenchmarkGuardianMemory$' 10x
# issue 4
run stop . '^BenchmarkStopTree50$' 30x
run admission . '^BenchmarkAdmission100$' 30x
run admit-internal ./internal/admit/ . 200x
# issue 5 (the CLI figures over the same kind of store: bench/scale.sh)
run scale . '^BenchmarkScale$' 20x
run gc . '^BenchmarkGCOverlay$' 1x -count=3
# issue 3 (environments and storage)
run env-create . '^BenchmarkEnvCreateToFirstExit$' 15x
run exec-vs-run . '^BenchmarkExecVsRun$' 100x
run storage ./internal/storage/ . 5x HOSTFORK_BENCH_FILES=2000,20000
