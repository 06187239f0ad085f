#!/usr/bin/env bash
# Issue 11 (e): the tail of 'hostfork run -- /bin/true' over 300 sequential
# runs (store on the root disk), interleaved with bwrap: median, p90, p99,
# max, and the slowest runs with the 1-minute load when they ran.
#
# usage: bench/tails.sh [RUNS]   (default 300)
source "$(dirname "$0")/lib.sh"
need bwrap python3
runs=${1:-300}
build_hostfork
"$hf" run -- /bin/true
header "tails: $runs sequential runs"
"$hfb" ab -rounds "$runs" -warmup 5 -ref bwrap -json "$out/tails.json" \
	-title "$runs sequential run -- /bin/true (store on the root disk)" \
	"hostfork run=$hf run -- /bin/true" \
	"bwrap=bwrap --bind / / --dev /dev --proc /proc /bin/true" | tee "$out/tails.md"
python3 - "$out/tails.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
for c in r["commands"]:
    w = [s["wall_ms"] for s in c["samples"]]
    m = statistics.median(w)
    w2 = sorted(w)
    p99 = w2[max(0, -(-99 * len(w2) // 100) - 1)]
    slow = sorted(c["samples"], key=lambda s: -s["wall_ms"])[:5]
    print(f"{c['name']}: p99/median = {p99 / m:.2f}; slowest: " +
          ", ".join(f"{s['wall_ms']:.1f} ms (cpu {s['cpu_ms']:.1f}, load {s['load1']:.2f})" for s in slow))
PY
