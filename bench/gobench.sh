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
	env ${vars[@]+"${vars[@]}"} go test -v -run '^$' -bench "$bench" -benchtime "$benchtime" -timeout 120m ${flags[@]+"${flags[@]}"} "$pkg" |
		if [ -n "$out" ]; then tee "$out/go-$name.txt"; else cat; fi
}
# issues 9 and 11 (the root package's benchmarks of issues 2-5 went with
# the move to internal/engine; these replace the library ones)
run launch ./internal/engine/ '^BenchmarkLaunch$' 200x
run stop ./internal/engine/ '^BenchmarkStopTree50$' 30x
run listing ./internal/registry/ '^BenchmarkListing$' 10x
# issues 3 and 4 (packages that kept theirs)
run admit-internal ./internal/admit/ . 200x
run storage ./internal/storage/ . 5x HOSTFORK_BENCH_FILES=2000,20000
