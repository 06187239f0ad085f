#!/usr/bin/env bash
# Issue 4: capture of 1 GiB of output through 'hostfork run', to files
# (--output files: the workload writes straight to its stdout file) and in
# the default pipe mode (the guardian tees to the file and forwards to
# hostfork, whose stdout goes to /dev/null here), against
# 'head -c 1G /dev/zero | cat > FILE' on the same filesystem (the store's).
#
# usage: bench/capture.sh [ROUNDS [RUNS]]   (default 3 rounds of 4 runs)
#
# Each run's output file is deleted before the next run (--prepare). The
# rounds are combined with bench/aggregate.py. Throughput = 1 GiB / median.
source "$(dirname "$0")/lib.sh"
need hyperfine python3
rounds=${1:-3}
runs=${2:-4}
build_hostfork
"$hf" run -- /bin/true
header "capture of 1 GiB: $rounds rounds of $runs runs (store and cat's file on $(df --output=fstype "$work" | tail -1))"
out=${BENCH_OUT:-$work}
clean="rm -f $work/cat.out; find $store/runs -name stdout -size +1M -delete"
for r in $(seq "$rounds"); do
	hyperfine --warmup 1 --runs "$runs" --style none --prepare "$clean" --export-json "$out/capture-$r.json" \
		-n 'cat > file' "head -c 1G /dev/zero | cat > $work/cat.out" \
		-n 'hostfork run --output files' "$hf run --output files -- head -c 1G /dev/zero" \
		-n 'hostfork run (pipe)' "$hf run -- head -c 1G /dev/zero > /dev/null" >/dev/null
	echo "round $r done; load $(load)"
done
sh -c "$clean"
echo "load after: $(load)"
"$(dirname "$0")/aggregate.py" --ref 'cat > file' "$out"/capture-*.json | tee "$out/capture.md"
python3 - "$out"/capture-*.json <<'PY'
import json, statistics, sys
t = {}
for f in sys.argv[1:]:
    for r in json.load(open(f))["results"]:
        t.setdefault(r["command"], []).extend(r["times"])
ref = statistics.median(t["cat > file"])
print("\nthroughput (GiB/s, from the medians) and share of cat's:")
for n, v in t.items():
    m = statistics.median(v)
    print(f"  {n:30s} {1/m:5.2f} GiB/s  {ref/m*100:5.1f}% of cat")
PY
