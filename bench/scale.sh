#!/usr/bin/env bash
# Issues 9 and 5: listings over a store of 10,000 retained runs.
#
# The store is seeded with real runs, two at a time, half of them labelled
# agent=a1, each leaving what 'hostfork run -- true' leaves (a stopped
# environment, an exited command, run directory, logs, receipt, ledger,
# events): through the library (hfbench seed: Host.Run of 'true' in one
# process, the default) or with BENCH_SEED=cli through N processes of
# 'hostfork run -- true' (slow: every invocation at this size pays the
# store's open, see docs/benchmarks.md). Then, interleaved sample by sample against
# 'hostfork version' (the CLI's own start):
#   hostfork ps | ps --all | ps --all --json | ps -q --label agent=a1 --all
#   hostfork envs | envs --all | envs --all --json | status CMD
# and the library's Host.Commands / Host.Envs on the same store
# (hfbench list). The store is on the root disk and deleted at exit
# (BENCH_STORE=DIR keeps and reuses one).
#
# usage: bench/scale.sh [N [ROUNDS]]   (default 10000 and 20)
source "$(dirname "$0")/lib.sh"
need python3
n=${1:-10000}
rounds=${2:-20}
build_hostfork
if [ -n "${BENCH_STORE:-}" ]; then
	store=$BENCH_STORE
	export HOSTFORK_ROOT=$store
fi
have=0
[ -e "$store/registry.sqlite" ] && have=$("$hf" ps --all -q | wc -l)
header "scale: store $store with $n retained runs (has $have)"
if [ "$have" -lt "$n" ]; then
	t0=$(date +%s.%N)
	# The first run alone: two first runs on a fresh store race in
	# prepareStore (one sees runs/ before the other's registry.sqlite).
	[ "$have" = 0 ] && "$hf" run --label agent=a1 -- true && have=1
	if [ "${BENCH_SEED:-library}" = cli ]; then
		seq "$have" $((n - 1)) | xargs -P 2 -I{} sh -c 'if [ $(({} % 2)) = 0 ]; then exec "$0" run --label agent=a1 -- true; else exec "$0" run -- true; fi' "$hf"
	else
		"$hfb" seed -root "$store" -n $((n - have)) -workers 2
	fi
	t1=$(date +%s.%N)
	echo "seeded $((n - have)) runs in $(python3 -c "print(f'{$t1 - $t0:.0f}')") s; load $(load)"
fi
cmd=$("$hf" ps --all -q | tail -1)
echo "commands: $("$hf" ps --all -q | wc -l); environments: $("$hf" envs --all -q | wc -l); registry: $(du -sh "$store"/registry.sqlite* | awk '{print $1}' | paste -sd/)"
"$hfb" ab -rounds "$rounds" -warmup 2 -ref 'hostfork version' -json "$out/scale-cli.json" \
	-title "listings at $n retained runs (store on the root disk)" \
	"hostfork ps=$hf ps" \
	"hostfork ps --all=$hf ps --all" \
	"hostfork ps --all --json=$hf ps --all --json" \
	"hostfork ps -q --all --label (half)=$hf ps -q --all --label agent=a1" \
	"hostfork envs=$hf envs" \
	"hostfork envs --all=$hf envs --all" \
	"hostfork envs --all --json=$hf envs --all --json" \
	"hostfork status CMD=$hf status $cmd" \
	"hostfork version=$hf version" | tee "$out/scale-cli.md"
"$hfb" list -root "$store" -n "$rounds" | tee "$out/scale-library.md"
