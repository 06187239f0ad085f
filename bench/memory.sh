#!/usr/bin/env bash
# Issue 11 (i), second half: the anonymous memory of a live guardian (and
# of a keeper), from /proc/PID/smaps_rollup (Anonymous) and
# /proc/PID/status (RssAnon), 200 ms after the start of 'sleep 1000' under
# 'hostfork exec --detach'; the sleep itself for scale. The guardian's pid
# is the one its command's record names (status --json); the keeper's the
# environment's.
#
# usage: bench/memory.sh [N]   (default 10 commands)
source "$(dirname "$0")/lib.sh"
need python3
n=${1:-10}
trees=${BENCH_TREES:-/var/tmp/hostfork-bench-trees}
make_tree "$trees/lower-2000" 2000
build_hostfork
header "guardian and keeper memory: $n commands"
env=$("$hf" create --until-stopped --tree w=overlay:"$trees/lower-2000" --replace /mnt=w)
on_exit "$hf" stop "$env"
rows=()
for i in $(seq "$n"); do
	c=$("$hf" exec --detach "$env" -- sleep 1000)
	sleep 0.2
	rows+=("$("$hf" status --json "$c")")
done
"$hf" status --json "$env" >"$work/env.json"
python3 - "$work/env.json" "${rows[@]}" <<'PY' | tee "$out/memory.md"
import json, re, statistics, sys
def mem(pid):
    r = {}
    try:
        s = open(f"/proc/{pid}/smaps_rollup").read()
        r["anon"] = int(re.search(r"^Anonymous:\s+(\d+)", s, re.M).group(1))
        r["rss"] = int(re.search(r"^Rss:\s+(\d+)", s, re.M).group(1))
        st = open(f"/proc/{pid}/status").read()
        r["rssanon"] = int(re.search(r"^RssAnon:\s+(\d+)", st, re.M).group(1))
        r["name"] = re.search(r"^Name:\s+(\S+)", st, re.M).group(1)
    except (OSError, AttributeError):
        return None
    return r
env = json.load(open(sys.argv[1]))
g, w = [], []
for doc in sys.argv[2:]:
    c = json.loads(doc)
    a, b = mem(c["guardian"]["pid"]), mem(c["workload"]["pid"])
    if a: g.append(a)
    if b: w.append(b)
k = [mem(env["keeper"]["pid"])] if env.get("keeper") else []
print("| process | n | name | Anonymous KiB (median, min–max) | RssAnon KiB | Rss KiB |")
print("|---|---|---|---|---|---|")
for label, v in (("guardian", g), ("keeper (overlay view)", [x for x in k if x]), ("workload: sleep", w)):
    if not v:
        continue
    an = [x["anon"] for x in v]
    print(f"| {label} | {len(v)} | {v[0]['name']} | {statistics.median(an):g} ({min(an)}–{max(an)}) | {statistics.median(x['rssanon'] for x in v):g} | {statistics.median(x['rss'] for x in v):g} |")
PY
