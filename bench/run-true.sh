#!/usr/bin/env bash
# Issue 11 (a): 'hostfork run -- /bin/true' against
# 'bwrap --bind / / --dev /dev --proc /proc /bin/true', wall and CPU time,
# with the store on the root disk and on tmpfs, interleaved sample by
# sample (bench/hfbench ab). /bin/true, 'unshare -m' and 'hostfork
# version' (the Go CLI's own start) are measured in the same rounds for
# scale. CPU = user+sys of the process and the descendants it waited for
# (guardian and workload; bwrap's init and workload).
#
# The main rows keep their stores near-empty with an untimed 'hostfork gc
# --retain-evidence 0s' before each sample, which also keeps the WAL short
# (its checkpoint). The "growing" row uses a third store that keeps every
# run (ROUNDS environments by the end): a store in steady use. An early
# hostfork read every retained environment at each call; it no longer
# does (1,000 retained runs cost nothing measurable, docs/benchmarks.md,
# fourth session). On ext4 without a journal the gc's deletions slow the
# next inode allocations (see bench/concurrent.sh).
#
# usage: bench/run-true.sh [ROUNDS]   (default 200)
source "$(dirname "$0")/lib.sh"
need bwrap unshare
rounds=${1:-200}
build_hostfork
"$hf" run -- /bin/true # create the store before timing
tmpfs_store
grow="$work/store-growing"
"$hf" --root "$grow" run -- /bin/true
gc="--retain-evidence 0s --retain-trees 0s"
header "run -- /bin/true: $rounds interleaved rounds"
"$hfb" ab -rounds "$rounds" -warmup 5 -ref bwrap -json "$out/run-true.json" \
	-title "run -- /bin/true, store on the root disk ($store) and on tmpfs ($shmstore)" \
	-prepare "hostfork run (disk store)=$hf --root $store gc $gc" \
	-prepare "hostfork run (tmpfs store)=$hf --root $shmstore gc $gc" \
	"hostfork run (disk store)=$hf --root $store run -- /bin/true" \
	"hostfork run (tmpfs store)=$hf --root $shmstore run -- /bin/true" \
	"hostfork run (disk store, growing)=$hf --root $grow run -- /bin/true" \
	"hostfork version=$hf version" \
	"/bin/true=/bin/true" \
	"unshare -m=unshare -m /bin/true" \
	"bwrap=bwrap --bind / / --dev /dev --proc /proc /bin/true" | tee "$out/run-true.md"
