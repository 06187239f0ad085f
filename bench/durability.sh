#!/usr/bin/env bash
# Issue 11 (g): what one invocation makes durable. For each kind of call
# (run -- /bin/true; exec into an environment without and with an overlay
# view; create; stop), RUNS traced runs with
#   strace -f -y -xx -s 8 -T -e trace=fsync,fdatasync,sync_file_range,pwrite64,execve,fcntl
# give per run: fsync-like calls (and which files, from -y), durable
# commits (WAL frames whose header carries a database size: SQLite's commit
# frame), WAL frames and bytes, writes to the database file itself (a
# checkpoint), execs, and fcntl lock calls. Tracing slows the run, so no
# time here is a benchmark figure; fsync durations (-T) are given for scale.
#
# usage: bench/durability.sh [RUNS]   (default 40)
source "$(dirname "$0")/lib.sh"
need strace python3
runs=${1:-40}
trees=${BENCH_TREES:-/var/tmp/hostfork-bench-trees}
make_tree "$trees/lower-2000" 2000
build_hostfork
"$hf" run -- /bin/true
header "durability per invocation: $runs traced runs of each"
plain=$("$hf" create --until-stopped)
ov=$("$hf" create --until-stopped --tree w=overlay:"$trees/lower-2000" --replace /mnt=w)
on_exit "$hf" stop "$plain" "$ov"
mkdir -p "$work/tr"
trace() { # NAME ARGV...
	local name=$1 i
	shift
	for i in $(seq "$runs"); do
		strace -f -qq -y -xx -s 8 -T -o "$work/tr/$name.$i" \
			-e trace=fsync,fdatasync,sync_file_range,pwrite64,execve,fcntl "$@" >/dev/null
	done
}
trace run "$hf" run -- /bin/true
trace exec "$hf" exec "$plain" -- /bin/true
trace exec-overlay "$hf" exec "$ov" -- /bin/true
for i in $(seq "$runs"); do
	# -b execve: stop following at the keeper's exec (it lives on, and
	# writes nothing durable).
	strace -f -b execve -qq -y -xx -s 8 -T -o "$work/tr/create.$i" -e trace=fsync,fdatasync,sync_file_range,pwrite64,execve,fcntl \
		"$hf" create --until-stopped --tree w=overlay:"$trees/lower-2000" --replace /mnt=w >"$work/tr/id.$i"
	strace -f -qq -y -xx -s 8 -T -o "$work/tr/stop.$i" -e trace=fsync,fdatasync,sync_file_range,pwrite64,execve,fcntl \
		"$hf" stop "$(cat "$work/tr/id.$i")" >/dev/null
done
echo "load after: $(load)"
[ -n "${BENCH_KEEP_TRACES:-}" ] && cp -r "$work/tr" "$BENCH_KEEP_TRACES"
python3 - "$work/tr" "$runs" <<'PY' | tee "$out/durability.md"
import collections, os, re, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
def unhex(p):
    return re.sub(r'\\x([0-9a-f]{2})', lambda m: chr(int(m.group(1), 16)), p)
start = re.compile(r'^(\d+) (\w+)\((.*?)(?:\) += (-?\d+|\?)[^<]*(?:<([\d.]+)>)?| <unfinished \.\.\.>)$')
resumed = re.compile(r'^(\d+) <\.\.\. (\w+) resumed>.*= (-?\d+|\?)[^<]*(?:<([\d.]+)>)?$')
def one(path):
    r = collections.Counter()
    files = collections.Counter()
    durs = []
    pending = {}
    def done(pid, name, ret, dur):
        if name in ("fsync", "fdatasync", "sync_file_range") and dur:
            durs.append(float(dur) * 1000)
        if name == "execve" and ret == "0":
            r["execs"] += 1
    for line in open(path):
        line = line.rstrip("\n")
        m = resumed.match(line)
        if m:
            pid, name, ret, dur = m.groups()
            done(pid, name, ret, dur)
            continue
        m = start.match(line)
        if not m:
            continue
        pid, name, args, ret, dur = m.groups()
        if ret is not None:
            done(pid, name, ret, dur)
        if name in ("fsync", "fdatasync", "sync_file_range"):
            r["fsync"] += 1
            f = re.match(r'\d+<([^>]*)>', args)
            p = unhex(f.group(1)) if f else "?"
            p = p.replace(os.path.dirname(d) + "/store", "STORE")
            p = re.sub(r'/runs/[^/]+', '/runs/ENV', p)
            p = re.sub(r'/commands/[^/]+', '/commands/CMD', p)
            p = re.sub(r'/trees/[^/]+', '/trees/ENV-TREE', p)
            files[f"{name}({p})"] += 1
        elif name == "pwrite64":
            f = re.match(r'\d+<([^>]*)>, "((?:\\x[0-9a-f]{2})*)"[^,]*, (\d+)', args)
            if not f:
                continue
            p, data, n = unhex(f.group(1)), f.group(2), int(f.group(3))
            if p.endswith("-wal"):
                r["wal bytes"] += n
                if n == 24:  # a frame header: page number, then db size (non-zero on a commit frame)
                    b = bytes(int(x, 16) for x in data.split("\\x")[1:])
                    r["wal frames"] += 1
                    if len(b) >= 8 and int.from_bytes(b[4:8], "big") != 0:
                        r["commits"] += 1
            elif p.endswith("registry.sqlite"):
                r["db writes (checkpoint)"] += 1
        elif name == "fcntl" and re.search(r'F_(OFD_)?(SETLK|SETLKW|GETLK)', args):
            r["fcntl locks"] += 1
    return r, files, durs
kinds = ["run", "exec", "exec-overlay", "create", "stop"]
label = {"run": "run -- /bin/true", "exec": "exec ENV -- /bin/true (no view)", "exec-overlay": "exec ENV -- /bin/true (overlay view)",
         "create": "create (overlay tree + view)", "stop": "stop ENV (overlay)"}
keys = ["fsync", "commits", "wal frames", "wal bytes", "db writes (checkpoint)", "execs", "fcntl locks"]
print(f"| per invocation ({runs} runs each; median, [min–max]) | " + " | ".join(keys) + " |")
print("|---" * (len(keys) + 1) + "|")
allfiles = {}
alldurs = []
for k in kinds:
    rs = []
    files = collections.Counter()
    for i in range(1, runs + 1):
        p = os.path.join(d, f"{k}.{i}")
        if os.path.exists(p):
            r, f, du = one(p)
            if r["execs"] == 0:
                print(f"warning: {p} holds no successful execve (not counted): {open(p).read(300)!r}", file=sys.stderr)
                continue
            rs.append(r); files.update(f); alldurs += du
    cells = []
    for key in keys:
        v = [r[key] for r in rs]
        cells.append(f"{statistics.median(v):g} [{min(v)}–{max(v)}]")
    print(f"| {label[k]} | " + " | ".join(cells) + " |")
    allfiles[k] = (files, len(rs))
print()
for k in kinds:
    files, n = allfiles[k]
    print(f"{label[k]}: fsyncs per run by file: " + "; ".join(f"{f} {c / n:.2f}" for f, c in files.most_common()))
print(f"\nfsync duration under strace: median {statistics.median(alldurs):.3f} ms, p90 {sorted(alldurs)[int(.9 * len(alldurs))]:.3f} ms ({len(alldurs)} calls)")
PY
