#!/usr/bin/env bash
# Issue 35's "100 concurrent sleep 0.5 <= 1.5x bwrap" through a warm
# server: 100 runs started at once, each in its own fresh environment,
# all waited for, interleaved round by round (bench/hfbench ab -par 100,
# order rotated per round) with bwrap and the CLI path:
#   server       the public Go client (package client) of a warm
#                'hostfork serve', from one program: 100 goroutines, each
#                POST /v1/runs (environment + first command; the server
#                stops the environment when the tree has exited, as 'run'
#                does) and a wait for the command's tree (hfbench "@run")
#   --host CLI   100 'hostfork --host SOCK run --ttl 10m -- sleep 0.5'
#                processes against the same server
#   CLI          100 'hostfork run -- sleep 0.5' processes, in-process
#                library, their own store (bench/lighter.sh's path)
#   bwrap        100 'bwrap --bind / / --dev /dev --proc /proc sleep 0.5'
# Each hostfork variant's store is emptied (gc, untimed) before its sample.
# The server is started fresh on its own store and stopped (by PID) at
# the end; stores, cgroups and processes are removed on exit.
#
# usage: bench/warm100.sh [ROUNDS]   (default 10; as root)
source "$(dirname "$0")/lib.sh"
need bwrap
rounds=${1:-10}
build_hostfork
"$hf" run -- /bin/true # the CLI's store, made before timing
ss="$work/store-serve"
"$hf" --root "$ss" run -- /bin/true
HOSTFORK_ROOT="$ss" "$hf" serve >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
on_exit "kill -TERM $serve_pid; wait $serve_pid"
on_exit "$hf" --root "$ss" stop --all --grace 0
sock=""
for _ in $(seq 300); do
	sock=$(sed -n 's|^hostfork serve: listening on unix://||p' "$work/serve.out")
	[ -n "$sock" ] && break
	kill -0 "$serve_pid" 2>/dev/null || break
	sleep 0.1
done
[ -n "$sock" ] || { echo "bench: hostfork serve did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
echo "server: pid $serve_pid, store $ss, unix://$sock"
gc="gc --retain-evidence 0s --retain-trees 0s"

header "100 concurrent sleep 0.5 through a warm server: $rounds interleaved rounds"
"$hfb" ab -rounds "$rounds" -warmup 1 -par 100 -ref bwrap -json "$out/warm100.json" \
	-title "100 concurrent sleep 0.5, each in a fresh environment, start all, wait all" \
	-prepare "server=$hf --root $ss $gc" \
	-prepare "CLI --host=$hf --root $ss $gc" \
	-prepare "CLI=$hf --root $store $gc" \
	"server=@run $sock sleep 0.5" \
	"CLI --host=$hf --host unix://$sock run --ttl 10m -- sleep 0.5" \
	"CLI=$hf --root $store run -- sleep 0.5" \
	"bwrap=bwrap --bind / / --dev /dev --proc /proc sleep 0.5" | tee "$out/warm100.md"
echo "server: $(grep -E '^(VmHWM|VmRSS)' "/proc/$serve_pid/status" | tr -s ' \t' ' ' | paste -sd';')"
