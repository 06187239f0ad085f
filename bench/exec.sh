#!/usr/bin/env bash
# Issue 11 (b): 'hostfork exec ENV -- /bin/true' into an environment with an
# overlay tree replacing /mnt in its view, against
#   bwrap --bind / / --dev /dev --proc /proc --bind MERGED /mnt /bin/true
# over an overlay mounted beforehand on the host (same lower, its own
# upper), and 'nsenter -t KEEPER -m /bin/true' (enter the environment's
# own mount namespace through its keeper: the floor of any exec into it).
# Interleaved sample by sample; store on the root disk (and on tmpfs).
#
# usage: bench/exec.sh [ROUNDS]   (default 200)
# The 2,000-file lower is kept in $BENCH_TREES (default
# /var/tmp/hostfork-bench-trees) for the next run.
source "$(dirname "$0")/lib.sh"
need bwrap nsenter python3
rounds=${1:-200}
trees=${BENCH_TREES:-/var/tmp/hostfork-bench-trees}
make_tree "$trees/lower-2000" 2000
lower="$trees/lower-2000"
build_hostfork
tmpfs_store
env=$("$hf" create --until-stopped --tree w=overlay:"$lower" --replace /mnt=w)
envt=$("$hf" --root "$shmstore" create --until-stopped --tree w=overlay:"$lower" --replace /mnt=w)
on_exit "$hf" --root "$store" stop "$env"
on_exit "$hf" --root "$shmstore" stop "$envt"
keeper=$("$hf" status --json "$env" | python3 -c 'import json,sys; print(json.load(sys.stdin)["keeper"]["pid"])')
mkdir -p "$work/ov/upper" "$work/ov/work" "$work/ov/merged"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$work/ov/upper,workdir=$work/ov/work" "$work/ov/merged"
on_exit umount "$work/ov/merged"
header "exec into an overlay environment: $rounds interleaved rounds (env $env, keeper $keeper)"
"$hfb" ab -rounds "$rounds" -warmup 5 -ref 'bwrap over overlay' -json "$out/exec.json" \
	-title "exec ENV -- /bin/true into an overlay environment (lower: 2,000 files on the root disk)" \
	"hostfork exec (disk store)=$hf --root $store exec $env -- /bin/true" \
	"hostfork exec (tmpfs store)=$hf --root $shmstore exec $envt -- /bin/true" \
	"nsenter -t KEEPER -m=nsenter -t $keeper -m /bin/true" \
	"bwrap over overlay=bwrap --bind / / --dev /dev --proc /proc --bind $work/ov/merged /mnt /bin/true" | tee "$out/exec.md"
