#!/usr/bin/env bash
# Issue 5: ps, status and reap through the CLI over a store with 10,000
# retained runs, then the same calls through the library (BenchmarkScale).
#
# usage: bench/scale.sh [RUNS [HYPERFINE_RUNS]]   (default 10000 and 30)
#
# The store is made by BenchmarkScale itself (HOSTFORK_BENCH_STORE): each
# run is what 'hostfork run -- true' leaves behind (records, ledger, run
# directory with logs, receipt and manifest), made through the library by
# 4 workers. It is on the root disk, like /var/lib/hostfork, and deleted at
# exit. Needs root.
source "$(dirname "$0")/lib.sh"
need hyperfine python3
n=${1:-10000}
runs=${2:-30}
build_hostfork
header "scale: store with $n retained runs"
(cd "$repo" && go test -c -o "$work/hostfork.test" .)
out=${BENCH_OUT:-$work}
# Make the store (and measure the library calls once it is there).
(cd "$work" && HOSTFORK_BENCH_STORE="$store" HOSTFORK_BENCH_RUNS="$n" \
	./hostfork.test -test.run '^$' -test.bench '^BenchmarkScale$' -test.benchtime 20x -test.v -test.timeout 120m) |
	tee "$out/scale-library.txt" | grep -E 'Benchmark|made|store|load'
env=$("$hf" ps --all --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[-1]["env"])')
cmd=$("$hf" ps --all --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[-1]["id"])')
echo "CLI over the same store; load $(load)"
hyperfine -N --warmup 3 --runs "$runs" --style none --export-json "$out/scale-cli.json" \
	-n 'hostfork version' "$hf version" \
	-n 'hostfork ps' "$hf ps" \
	-n 'hostfork status ENV' "$hf status $env" \
	-n 'hostfork status CMD' "$hf status $cmd" \
	-n 'hostfork reap' "$hf reap" \
	-n 'hostfork ps --all --json' "$hf ps --all --json" >/dev/null
echo "load after: $(load)"
"$(dirname "$0")/aggregate.py" --ref 'hostfork version' "$out/scale-cli.json" | tee "$out/scale-cli.md"
