#!/usr/bin/env bash
# Issue 2: 'hostfork run -- /bin/true' as a whole process, side by side with
# /bin/true, unshare -m and bwrap, plus 'hostfork run --output files' and
# 'hostfork version' (the CLI's own start cost).
#
# usage: bench/launch.sh [ROUNDS [RUNS]]   (default 5 rounds of 40 runs)
#
# hyperfine runs all runs of one command before the next; on a shared,
# noisy machine that lets a burst of load land on one command only. So the
# whole set is run ROUNDS times and the rounds are combined
# (bench/aggregate.py): medians over ROUNDS×RUNS runs per command. Needs
# root (cgroup2 tier, unshare -m). Tables and JSON go to $BENCH_OUT if set.
source "$(dirname "$0")/lib.sh"
need hyperfine bwrap unshare python3
rounds=${1:-5}
runs=${2:-40}
build_hostfork
"$hf" run -- /bin/true # create the store before timing
header "launch of /bin/true: $rounds rounds of $runs runs"
out=${BENCH_OUT:-$work}
for r in $(seq "$rounds"); do
	hyperfine -N --warmup 5 --runs "$runs" --style none --export-json "$out/launch-$r.json" \
		-n true '/bin/true' \
		-n 'unshare -m' 'unshare -m /bin/true' \
		-n bwrap 'bwrap --bind / / --dev /dev --proc /proc /bin/true' \
		-n 'hostfork version' "$hf version" \
		-n 'hostfork run' "$hf run -- /bin/true" \
		-n 'hostfork run --output files' "$hf run --output files -- /bin/true" >/dev/null
	echo "round $r done; load $(load)"
done
echo "load after: $(load)"
"$(dirname "$0")/aggregate.py" --ref true --ref bwrap "$out"/launch-*.json | tee "$out/launch.md"
