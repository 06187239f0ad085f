#!/usr/bin/env bash
# Issue 35's before-and-after: two builds of hostfork side by side with
# bwrap, interleaved sample by sample in one run (bench/hfbench ab), for
# the four speed targets of the issue:
#   run -- /bin/true           <= 3x bwrap (store on the root disk)
#   exec into an overlay env   <= 3x bwrap over a pre-mounted overlay
#   100 concurrent sleep 0.5   <= 1.5x bwrap
#   300 sequential runs        p99 <= 3x the median
# BEFORE and AFTER are directories holding hostfork (and hostfork-serve),
# e.g. built with scripts/build.sh at two commits; each gets its own store.
#
# usage: bench/lighter.sh BEFORE_DIR AFTER_DIR [ROUNDS [CONC_ROUNDS]]
#        (default 150 rounds, 4 concurrent rounds)
source "$(dirname "$0")/lib.sh"
need bwrap python3
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd)
rounds=${3:-150} crounds=${4:-4}
HOSTFORK_BIN="$after/hostfork" build_hostfork
bs="$work/store-before" as="$work/store-after"
"$before/hostfork" --root "$bs" run -- /bin/true
"$after/hostfork" --root "$as" run -- /bin/true
gc="--retain-evidence 0s --retain-trees 0s"
echo "before: $("$before/hostfork" version | head -1)"
echo "after:  $("$after/hostfork" version | head -1)"

header "run -- /bin/true: $rounds interleaved rounds"
"$hfb" ab -rounds "$rounds" -warmup 5 -ref bwrap -json "$out/run.json" \
	-title "run -- /bin/true, store on the root disk" \
	-prepare "before=$before/hostfork --root $bs gc $gc" \
	-prepare "after=$after/hostfork --root $as gc $gc" \
	"before=$before/hostfork --root $bs run -- /bin/true" \
	"after=$after/hostfork --root $as run -- /bin/true" \
	"bwrap=bwrap --bind / / --dev /dev --proc /proc /bin/true" | tee "$out/run.md"

trees=${BENCH_TREES:-/var/tmp/hostfork-bench-trees}
make_tree "$trees/lower-2000" 2000
lower="$trees/lower-2000"
eb=$("$before/hostfork" --root "$bs" create --until-stopped --tree w=overlay:"$lower" --replace /mnt=w)
ea=$("$after/hostfork" --root "$as" create --until-stopped --tree w=overlay:"$lower" --replace /mnt=w)
on_exit "$before/hostfork" --root "$bs" stop "$eb"
on_exit "$after/hostfork" --root "$as" stop "$ea"
mkdir -p "$work/ov/upper" "$work/ov/work" "$work/ov/merged"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$work/ov/upper,workdir=$work/ov/work" "$work/ov/merged"
on_exit umount "$work/ov/merged"
header "exec into an overlay environment: $rounds interleaved rounds"
"$hfb" ab -rounds "$rounds" -warmup 5 -ref 'bwrap over overlay' -json "$out/exec.json" \
	-title "exec ENV -- /bin/true into an overlay environment (lower: 2,000 files)" \
	"before=$before/hostfork --root $bs exec $eb -- /bin/true" \
	"after=$after/hostfork --root $as exec $ea -- /bin/true" \
	"bwrap over overlay=bwrap --bind / / --dev /dev --proc /proc --bind $work/ov/merged /mnt /bin/true" | tee "$out/exec.md"

header "100 concurrent sleep 0.5: $crounds interleaved rounds"
"$hfb" ab -rounds "$crounds" -warmup 1 -par 100 -ref bwrap -json "$out/concurrent.json" \
	-title "100 concurrent sleep 0.5, start all, wait all" \
	-prepare "before=$before/hostfork --root $bs gc $gc" \
	-prepare "after=$after/hostfork --root $as gc $gc" \
	"before=$before/hostfork --root $bs run -- sleep 0.5" \
	"after=$after/hostfork --root $as run -- sleep 0.5" \
	"bwrap=bwrap --bind / / --dev /dev --proc /proc sleep 0.5" | tee "$out/concurrent.md"

header "tails: 300 sequential runs each, interleaved"
"$hfb" ab -rounds 300 -warmup 5 -ref bwrap -json "$out/tails.json" \
	-title "run -- /bin/true, 300 sequential runs: median and p99" \
	"before=$before/hostfork --root $bs run -- /bin/true" \
	"after=$after/hostfork --root $as run -- /bin/true" \
	"bwrap=bwrap --bind / / --dev /dev --proc /proc /bin/true" | tee "$out/tails.md"
python3 - "$out/tails.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
for c in r["commands"]:
    w = sorted(s["wall_ms"] for s in c["samples"])
    med, p99 = statistics.median(w), w[int(0.99 * (len(w) - 1))]
    print(f"{c['name']}: median {med:.2f} ms, p99 {p99:.2f} ms, p99/median {p99 / med:.2f}")
PY
