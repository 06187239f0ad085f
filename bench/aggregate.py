#!/usr/bin/env python3
"""Combine hyperfine JSON exports (several rounds of the same commands) into
one table: per command the median of all runs, p10 and p90, the number of
runs, and the ratio of medians to reference commands.

usage: aggregate.py [--ref NAME]... ROUND.json...
"""
import json
import statistics
import sys


def quantile(v, q):
    v = sorted(v)
    return v[int(q * (len(v) - 1) + 0.5)]


def main(argv):
    refs, files = [], []
    it = iter(argv)
    for a in it:
        if a == "--ref":
            refs.append(next(it))
        else:
            files.append(a)
    times, order = {}, []
    for f in files:
        for r in json.load(open(f))["results"]:
            name = r["command"]
            if name not in times:
                times[name] = []
                order.append(name)
            times[name].extend(r["times"])
    med = {n: statistics.median(times[n]) * 1000 for n in order}
    head = f"| command | median ms | p10 | p90 | runs |" + "".join(f" × {r.replace('|', chr(92) + '|')} |" for r in refs)
    print(head)
    print("|---" * (5 + len(refs)) + "|")
    for n in order:
        t = [x * 1000 for x in times[n]]
        row = f"| {n.replace('|', chr(92) + '|')} | {med[n]:.2f} | {quantile(t, .1):.2f} | {quantile(t, .9):.2f} | {len(t)} |"
        row += "".join(f" {med[n] / med[r]:.2f} |" for r in refs if r in med)
        print(row)


if __name__ == "__main__":
    main(sys.argv[1:])
