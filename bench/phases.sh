#!/usr/bin/env bash
# Issues 2 and 11: where the wall time of 'hostfork run -- /bin/true' goes,
# from strace timestamps of a few syscalls (strace --seccomp-bpf stops only
# at the traced ones, so the rest runs at full speed; the stops still add
# time, so read the phases as shares, not as benchmark figures). The marks:
# hostfork's exec; the registry opened; each durable commit (the fsync of
# registry.sqlite-wal: reservation, registration, result); the guardian's
# exec; the workload's exec and exit; hostfork's exit.
#
# usage: bench/phases.sh [RUNS]   (default 40; medians per phase)
source "$(dirname "$0")/lib.sh"
need strace python3
runs=${1:-40}
build_hostfork
"$hf" run -- /bin/true
header "phases of hostfork run -- /bin/true ($runs traced runs)"
for i in $(seq "$runs"); do
	strace --seccomp-bpf -f -ttt -qq -y -o "$work/trace-$i" \
		-e trace=execve,fsync,fdatasync,exit_group,openat,mkdirat,unlinkat,clone3 \
		"$hf" run -- /bin/true
done
echo "load after: $(load)"
python3 - "$work" "$runs" <<'PY' | tee "$out/phases.md"
import re, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
def marks(path):
    lines = [l.split(None, 2) for l in open(path).read().splitlines()]
    lines = [l for l in lines if len(l) == 3]
    t0 = float(lines[0][1])
    m, commit, counts = [("exec hostfork", 0.0)], 0, {"mkdirat": 0, "unlinkat": 0, "openat": 0}
    seen = set()
    for pid, ts, s in lines:
        t = (float(ts) - t0) * 1000
        def mark(name):
            if name not in seen:
                seen.add(name); m.append((name, t))
        for k in counts:
            if s.startswith(k + "(") and "= -1" not in s:
                counts[k] += 1
        if s.startswith("openat(") and "registry.sqlite" in s:
            mark("registry opened")
        if s.startswith(("fsync(", "fdatasync(")) and "registry.sqlite-wal" in s:
            commit += 1
            mark(f"commit {commit}")
        if s.startswith("execve(") and "__hostfork_guardian" in s:
            mark("guardian exec")
        if s.startswith('execve("/bin/true"'):
            mark("workload exec")
        if s.startswith("exit_group") and "workload exec" in seen:
            mark("workload exit")
    m.append(("hostfork exit", (float(lines[-1][1]) - t0) * 1000))
    return m, counts, commit
per, order, cnt = {}, [], {}
for i in range(1, runs + 1):
    m, counts, commits = marks(f"{work}/trace-{i}")
    for k, v in counts.items():
        cnt.setdefault(k, []).append(v)
    cnt.setdefault("commits", []).append(commits)
    for (a, ta), (b, tb) in zip(m, m[1:]):
        key = f"{a} → {b}"
        if key not in per:
            per[key] = []; order.append(key)
        per[key].append(tb - ta)
total = statistics.median([sum(v[i] for v in per.values() if i < len(v)) for i in range(runs)])
print(f"| phase ({runs} runs under strace --seccomp-bpf) | median ms | p90 | runs with it |")
print("|---|---|---|---|")
for k in order:
    v = sorted(per[k])
    print(f"| {k} | {statistics.median(v):.2f} | {v[int(.9 * (len(v) - 1))]:.2f} | {len(v)} |")
print("\nper run (median): " + ", ".join(f"{k} {statistics.median(v):g}" for k, v in cnt.items()))
PY
