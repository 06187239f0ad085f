#!/usr/bin/env bash
# Issue 11: where the wall time of 'hostfork run -- /bin/true' goes, from
# kernel tracepoints and uprobes recorded by perf (no ptrace stops: unlike
# bench/phases.sh the run keeps its speed; a uprobe costs a few µs). Marks:
# hostfork's exec; entry of main.main and of the engine's steps (store
# open, registry open, the registry check, plan, create, build, guardian
# start, release, the CLI's foreground wait, the CLI's leftovers stop, the
# watcher's finish); each synced commit (an fsync's return); the
# guardian's and the workload's exec and exit; hostfork's exit. The
# uprobes sit on a copy of the binary in the work directory and are
# deleted at exit.
#
# usage: bench/phases-perf.sh [RUNS]   (default 40; medians per mark)
source "$(dirname "$0")/lib.sh"
need perf python3
runs=${1:-40}
build_hostfork
"$hf" run -- /bin/true
header "phases of hostfork run -- /bin/true from perf tracepoints and uprobes ($runs runs)"
pkg=github.com/habemus-papadum/hostfork/internal
probes=(mainmain=main.main climain=$pkg/cli.Main prepstore=$pkg/engine.prepareStore regopen=$pkg/registry.Open
	checkreg=$pkg/engine.checkRegistry "plan=$pkg/engine.(*Engine).Plan" "create=$pkg/engine.(*Engine).Create"
	"build=$pkg/engine.(*creation).build" supstart=$pkg/supervise.Start "release=$pkg/engine.(*launch).release"
	foreground=$pkg/cli.foreground "finish=$pkg/engine.(*Running).finish" "stopcmd=$pkg/engine.(*Engine).StopCommand")
on_exit perf probe -q -d "'probe_hostfork:*'"
for p in "${probes[@]}"; do
	perf probe -q -x "$hf" -a "$p" 2>/dev/null || echo "no uprobe for $p"
done
ev=$(perf probe -l 2>/dev/null | awk '/probe_hostfork:/ {print $1}' | paste -sd,)
for i in $(seq "$runs"); do
	perf record -q -o "$work/p.$i" -e "${ev:+$ev,}sched:sched_process_exec,sched:sched_process_exit,sched:sched_process_fork,syscalls:sys_exit_fsync,syscalls:sys_exit_fdatasync" \
		-- "$hf" run -- /bin/true 2>/dev/null
	perf script -i "$work/p.$i" -F comm,tid,time,event >"$work/s.$i" 2>/dev/null
done
echo "load after: $(load)"
python3 - "$work" "$runs" <<'PY' | tee "$out/phases-perf.md"
import re, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
label = {"mainmain": "main.main", "climain": "cli.Main", "prepstore": "engine.prepareStore", "regopen": "registry.Open",
         "checkreg": "engine.checkRegistry", "plan": "engine.Plan", "create": "engine.Create", "build": "creation.build",
         "supstart": "supervise.Start", "release": "launch.release", "foreground": "cli.foreground",
         "finish": "Running.finish (the watcher records the result)", "stopcmd": "engine.StopCommand (the CLI's leftovers stop)"}
per, n = {}, 0
for i in range(1, runs + 1):
    ev = []
    for l in open(f"{work}/s.{i}"):
        m = re.match(r'\s*(\S+)\s+(\d+)\s+([\d.]+):\s+(\S+):', l)
        if m:
            ev.append((m.group(1), int(m.group(2)), float(m.group(3)) * 1000, m.group(4)))
    if not ev:
        continue
    n += 1
    t0, main = ev[0][2], ev[0][1]
    marks, seen, commits = {"exec hostfork": t0}, set(), 0
    def mark(k, t):
        if k not in marks:
            marks[k] = t
    for comm, tid, t, name in ev:
        if name.startswith("probe_"):
            mark(label.get(name.split(":")[1], name), t)
        elif name == "sched:sched_process_exec" and tid != main:
            mark("guardian exec'd" if "guardian exec'd" not in marks else "workload exec'd", t)
        elif name == "sched:sched_process_exit" and "workload exec'd" in marks and "workload exit" not in marks and tid != main:
            mark("workload exit", t)
        elif name == "sched:sched_process_exit" and tid == main:
            mark("hostfork exit", t)
        elif name.startswith("syscalls:sys_exit_f"):
            commits += 1
            # Three synced commits a run: the reservation, the
            # registration, the result.
            mark(f"synced commit {commits} (fsync returned)" if commits <= 3 else "a further fsync (a checkpoint)", t)
    for k, t in marks.items():
        per.setdefault(k, []).append(t - t0)
rows = sorted(per, key=lambda k: statistics.median(per[k]))
print(f"| mark ({n} runs; marks seen in fewer runs say so) | median ms since exec | p90 | step from the mark above |")
print("|---|---|---|---|")
prev = 0
for k in rows:
    v = sorted(per[k]); m = statistics.median(v)
    seen = "" if len(v) == n else f" ({len(v)} runs)"
    print(f"| {k}{seen} | {m:.2f} | {v[int(.9 * (len(v) - 1))]:.2f} | +{m - prev:.2f} |")
    prev = m
PY
