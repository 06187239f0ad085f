#!/usr/bin/env bash
# The load soak (issue 39): a mixed load on one store for MINUTES (default
# 30) — short runs, exec into live environments, detached servers kept at a
# few hundred, OOM kills, timeouts, explicit stops — with a SIGKILL of a
# random CLI call or of serve every minute and reap + gc every 5 minutes.
# It prints one JSON line per minute (launch p50/p99, serve's RSS and
# descriptors, the registry's size, the store's file count, hostfork
# processes, live environments, cgroups) and checks at the end: no lost
# record, no leaked cgroup, mount or process, p99 steady, growth bounded by
# retention. Exit 1 when a check fails.
#
#   bash bench/soak.sh            # 30 minutes, the figures in docs/benchmarks.md
#   bash bench/soak.sh 2 --check-timing=false --gc-every 1m --retain 30s --ttl 1m  # CI
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
minutes=${1:-30}
shift || true
bin=$(mktemp -d "${BENCH_TMP:-/var/tmp}/hostfork-soak-bin.XXXXXX")
trap 'rm -rf "$bin"' EXIT
(cd "$repo" && go build -o "$bin/hostfork" ./cmd/hostfork && go build -o "$bin/hostfork-serve" ./cmd/hostfork-serve && go build -o "$bin/soak" ./bench/soak)
echo "soak: $minutes minutes on $(nproc) CPUs, kernel $(uname -r), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/soak" -hostfork "$bin/hostfork" -duration "${minutes}m" "$@"
