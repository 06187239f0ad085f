#!/usr/bin/env bash
# Issue 2: where the time of 'hostfork run [--output files] -- /bin/true'
# goes, from strace timestamps of a few syscalls (strace --seccomp-bpf
# stops only at the traced ones, so the rest runs at full speed; the
# traced stops still add some time, so read the phases as shares, not as
# absolute figures).
#
# usage: bench/phases.sh [RUNS]   (default 20; medians per phase)
source "$(dirname "$0")/lib.sh"
need strace python3
runs=${1:-20}
build_hostfork
"$hf" run -- /bin/true
header "phases of hostfork run -- /bin/true ($runs traced runs per mode)"
for mode in pipe files; do
	for i in $(seq "$runs"); do
		strace --seccomp-bpf -f -ttt -qq -o "$work/trace-$mode-$i" \
			-e trace=execve,clone,clone3,fsync,fdatasync,exit_group,openat,pidfd_open \
			"$hf" run --output "$mode" -- /bin/true
	done
done
echo "load after: $(load)"
python3 - "$work" "$runs" <<'PY'
import re, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
# Marks, in order; each phase is the time from one mark to the next.
def marks(path):
    lines = open(path).read().splitlines()
    t0 = float(lines[0].split()[1])
    m = {"start": 0.0}
    fsyncs = 0
    for l in lines:
        f = l.split(None, 2)
        if len(f) < 3:
            continue
        t = (float(f[1]) - t0) * 1000
        s = f[2]
        if "registry.sqlite" in s and "openat" in s and "store open" not in m:
            m["store open"] = t
        if s.startswith(("fsync", "fdatasync")):
            fsyncs += 1
        if "__hostfork_guardian" in s and s.startswith("execve") and "guardian exec" not in m:
            m["guardian exec"] = t
        if s.startswith('execve("/bin/true"') and "workload exec" not in m:
            m["workload exec"] = t
        if s.startswith("exit_group") and "workload exec" in m and "workload exit" not in m:
            m["workload exit"] = t
    m["hostfork exit"] = (float(lines[-1].split()[1]) - t0) * 1000
    return m, fsyncs
for mode in ("pipe", "files"):
    per, fs = {}, []
    for i in range(1, runs + 1):
        m, n = marks(f"{work}/trace-{mode}-{i}")
        fs.append(n)
        keys = list(m)
        for a, b in zip(keys, keys[1:]):
            per.setdefault(f"{a} -> {b}", []).append(m[b] - m[a])
    print(f"\n--output {mode}: median ms per phase ({runs} runs), fsync/fdatasync calls per run: {statistics.median(fs):.0f}")
    for k, v in per.items():
        print(f"  {k:34s} {statistics.median(v):7.2f}")
PY
