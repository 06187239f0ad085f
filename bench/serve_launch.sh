#!/usr/bin/env bash
# Issue 12 "Measure": the per-launch overhead of the CLI through a warm
# 'hostfork serve' (--host) against the in-process CLI and bwrap, for
# /bin/true, interleaved: every iteration runs each variant once, in an
# order rotated per iteration, so a burst of load on a shared machine lands
# on all of them alike. Wall time of the whole client process (fork, exec,
# the launch, the wait for the tree, the exit) as a shell would see it.
#
# usage: bench/serve_launch.sh [ITERATIONS]   (default 200; needs root)
#
# Variants:
#   true                     /bin/true itself (the process floor)
#   bwrap                    bwrap --bind / / --dev /dev --proc /proc /bin/true
#   hostfork version         the CLI's own start and exit (no store)
#   run                      hostfork run -- /bin/true          (in-process)
#   run --host               hostfork --host S run --ttl 1m -- /bin/true
#   exec                     hostfork exec ENV -- /bin/true     (in-process)
#   exec --host              hostfork --host S exec ENV -- /bin/true
#
# It builds hostfork (or takes $HOSTFORK_BIN), makes a private store and
# cgroup parent, starts one server on the store, and removes all of it on
# exit. Results (a markdown table) go to stdout and to $BENCH_OUT/serve_launch.md
# when BENCH_OUT is set.
set -euo pipefail

iterations=${1:-200}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${BENCH_TMP:-/var/tmp}/hostfork-serve-bench.XXXXXX")
hf="$work/hostfork"
store="$work/store"
cgparent=""
serve_pid=""

cleanup() {
	local rc=$?
	if [ -x "$hf" ] && [ -e "$store/registry.sqlite" ]; then
		"$hf" --root "$store" stop --all --grace 0 >/dev/null 2>&1 || true
	fi
	if [ -n "$serve_pid" ]; then
		kill -TERM "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	if [ -n "$cgparent" ] && [ -d "$cgparent" ]; then
		find "$cgparent" -depth -type d -exec rmdir {} + 2>/dev/null || true
	fi
	rm -rf "$work"
	return $rc
}
trap cleanup EXIT

for t in bwrap python3; do
	command -v "$t" >/dev/null || { echo "bench: $t not found (apt-get install -y bubblewrap python3)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "bench: run as root (the cgroup2 tier, as the other launch benchmarks)" >&2; exit 2; }

if [ -n "${HOSTFORK_BIN:-}" ]; then
	cp "$HOSTFORK_BIN" "$hf"
	cp "$(dirname "$HOSTFORK_BIN")/hostfork-serve" "$work/"
else
	bash "$repo/scripts/build.sh" "$work" >/dev/null
fi
for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do
	if [ -e "$m/cgroup.subtree_control" ]; then
		cgparent="$m/hostfork-bench-$$"
		mkdir -p "$cgparent"
		export HOSTFORK_CGROUP_PARENT="$cgparent"
		break
	fi
done
export HOSTFORK_ROOT="$store"
unset HOSTFORK_HOST

"$hf" run -- /bin/true # create the store before timing
"$hf" serve >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
sock=""
for _ in $(seq 300); do
	sock=$(sed -n 's|^hostfork serve: listening on unix://||p' "$work/serve.out")
	[ -n "$sock" ] && break
	sleep 0.1
done
[ -n "$sock" ] || { echo "bench: hostfork serve did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
env=$("$hf" create --ttl 2h --purpose "serve launch benchmark")

echo "== per-launch overhead of /bin/true: $iterations interleaved iterations"
echo "host: $(uname -r), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; $(date -u +%FT%TZ)"
echo "hostfork: $("$hf" version | head -1); tree $(cd "$repo" && git log -1 --format=%h); store on $(df --output=fstype "$work" | tail -1); tier $("$hf" status --json "$env" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tier"])')"

python3 - "$iterations" "$hf" "unix://$sock" "$env" "${BENCH_OUT:-}" <<'PY'
import os, statistics, subprocess, sys, time

n, hf, host, env, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
bwrap = ["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/bin/true"]
variants = [
    ("true", ["/bin/true"]),
    ("bwrap", bwrap),
    ("hostfork version", [hf, "version"]),
    ("run", [hf, "run", "--", "/bin/true"]),
    ("run --host", [hf, "--host", host, "run", "--ttl", "1m", "--", "/bin/true"]),
    ("exec", [hf, "exec", env, "--", "/bin/true"]),
    ("exec --host", [hf, "--host", host, "exec", env, "--", "/bin/true"]),
]

def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]

def once(argv):
    t0 = time.perf_counter_ns()
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    d = time.perf_counter_ns() - t0
    if r.returncode != 0:
        sys.exit("%s: exit %d: %s" % (" ".join(argv), r.returncode, r.stderr.decode()))
    return d / 1e6

for name, argv in variants:  # warm caches, the server's connections
    for _ in range(3):
        once(argv)
times = {name: [] for name, _ in variants}
loads = []
before = load()
for i in range(n):
    k = i % len(variants)
    for name, argv in variants[k:] + variants[:k]:
        times[name].append(once(argv))
    loads.append(float(load()[0]))
after = load()

def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]

lines = ["| variant | median ms | p90 ms | mean ms | min ms | median − bwrap | median − in-process |",
         "|---|---:|---:|---:|---:|---:|---:|"]
med = {k: statistics.median(v) for k, v in times.items()}
for name, _ in variants:
    v = times[name]
    inproc = {"run --host": "run", "exec --host": "exec"}.get(name)
    rel = "%+.2f" % (med[name] - med[inproc]) if inproc else ""
    lines.append("| %s | %.2f | %.2f | %.2f | %.2f | %+.2f | %s |" % (name, med[name], pct(v, 0.9), statistics.mean(v), min(v), med[name] - med["bwrap"], rel))
lines.append("")
lines.append("n=%d per variant; load (1, 5, 15 min) before %s, after %s; 1-min load during: median %.2f, max %.2f" % (
    n, " ".join(before), " ".join(after), statistics.median(loads), max(loads)))
text = "\n".join(lines)
print(text)
if out:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "serve_launch.md"), "w") as f:
        f.write(text + "\n")
PY
