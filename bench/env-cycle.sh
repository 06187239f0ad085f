#!/usr/bin/env bash
# Issue 11 (c): an overlay environment's whole life through the CLI —
#   hostfork create --until-stopped --tree w=overlay:LOWER --replace /mnt=w
#   hostfork exec ENV -- /bin/true
#   hostfork stop ENV
# against the bare kernel work of the same thing:
#   mkdir -p UPPER WORK
#   unshare -m sh -c 'mount -t overlay overlay -o lowerdir=LOWER,... /mnt && exec /bin/true'
#   rm -rf UPPER WORK
# with a lower of 2,000 and of 20,000 files (creation must not depend on
# it). Interleaved sample by sample; the per-step medians follow the table.
# hostfork's stop deletes no file (the upper stays until gc), the peer's
# rm -rf deletes its upper: the peer does slightly more file work. An
# untimed 'hostfork gc --retain-evidence 0s --retain-trees 0s' before each
# hostfork sample keeps the store from growing and the WAL short.
# A last hostfork row gives the same life in one call, as a library user
# or a one-shot script has it: 'hostfork run --tree w=overlay:LOWER
# --replace /mnt=w -- /bin/true' creates the environment, runs the
# command in it and stops it.
#
# usage: bench/env-cycle.sh [ROUNDS]   (default 100)
source "$(dirname "$0")/lib.sh"
need unshare python3
rounds=${1:-100}
trees=${BENCH_TREES:-/var/tmp/hostfork-bench-trees}
make_tree "$trees/lower-2000" 2000
make_tree "$trees/lower-20000" 20000
build_hostfork
"$hf" run -- /bin/true
header "create + exec + stop of an overlay environment: $rounds interleaved rounds"
cyc() { echo "$hf create --until-stopped --tree w=overlay:$1 --replace /mnt=w ;; $hf exec \$1 -- /bin/true ;; $hf stop \$1"; }
peer() { echo "mkdir -p $work/p/u $work/p/w ;; unshare -m sh -c 'mount -t overlay overlay -o lowerdir=$1,upperdir=$work/p/u,workdir=$work/p/w /mnt && exec /bin/true' ;; rm -rf $work/p/u $work/p/w"; }
gc="$hf gc --retain-evidence 0s --retain-trees 0s"
"$hfb" ab -rounds "$rounds" -warmup 3 -ref 'unshare+overlay (2k)' -json "$out/env-cycle.json" \
	-prepare "hostfork (2k)=$gc" -prepare "hostfork (20k)=$gc" -prepare "hostfork run, one call (2k)=$gc" \
	-title "create + exec + stop of an overlay environment vs unshare + overlay mount + mkdir/rm" \
	"hostfork (2k)=$(cyc "$trees/lower-2000")" \
	"hostfork (20k)=$(cyc "$trees/lower-20000")" \
	"hostfork run, one call (2k)=$hf run --tree w=overlay:$trees/lower-2000 --replace /mnt=w -- /bin/true" \
	"unshare+overlay (2k)=$(peer "$trees/lower-2000")" \
	"unshare+overlay (20k)=$(peer "$trees/lower-20000")" | tee "$out/env-cycle.md"
echo "environments left in the store: $("$hf" envs --all -q | wc -l)"
