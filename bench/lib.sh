# Shared setup for the bench/ scripts (sourced, not run). It builds hostfork
# into a fresh temporary directory, makes a private store and cgroup parent
# for it, and removes all of them on exit. See docs/benchmarks.md.

set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hostfork-bench.XXXXXX")
store="$work/store"
hf="$work/hostfork"
cgparent=""

bench_cleanup() {
	if [ -n "$cgparent" ] && [ -d "$cgparent" ]; then
		# Only empty groups are left once every run stopped; rmdir
		# refuses anything else, deepest first.
		find "$cgparent" -depth -type d -exec rmdir {} + 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap bench_cleanup EXIT

need() {
	for t in "$@"; do
		command -v "$t" >/dev/null || { echo "bench: $t not found (apt-get install -y hyperfine bubblewrap)" >&2; exit 2; }
	done
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

build_hostfork() {
	(cd "$repo" && go build -o "$hf" ./cmd/hostfork)
	# A cgroup parent of our own, as the tests use, so nothing lands in
	# the host's default /sys/fs/cgroup/unified/hostfork.
	if [ "$(id -u)" = 0 ]; then
		for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do
			if [ -e "$m/cgroup.kill" ] || [ -e "$m/cgroup.subtree_control" ]; then
				cgparent="$m/hostfork-bench-$$"
				mkdir -p "$cgparent"
				export HOSTFORK_CGROUP_PARENT="$cgparent"
				break
			fi
		done
	fi
	export HOSTFORK_ROOT="$store"
	echo "hostfork: $("$hf" version | head -1); store $store; cgroup parent ${cgparent:-none}"
}

header() {
	echo "== $1"
	echo "host: $(uname -r), $(nproc) cores; load before: $(load)"
}
