# Shared setup for the bench/ scripts (sourced, not run). It builds hostfork
# with scripts/build.sh, as installed (or takes $HOSTFORK_BIN), and the
# bench driver hfbench into a fresh temporary directory, makes a private
# store and cgroup parent for them, and removes all of them on exit. See
# docs/benchmarks.md.

set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${BENCH_TMP:-/var/tmp}/hostfork-bench.XXXXXX")
store="$work/store"
hf="$work/hostfork"
hfb="$work/hfbench"
cgparent=""
shm=""
out=${BENCH_OUT:-$work}
mkdir -p "$out"

# on_exit CMD... runs CMD (e.g. an umount) at exit, before the stores go;
# the last registered runs first.
cleanups=()
on_exit() { cleanups=("$*" ${cleanups[@]+"${cleanups[@]}"}); }

bench_cleanup() {
	local rc=$?
	for c in ${cleanups[@]+"${cleanups[@]}"}; do
		eval "$c" >/dev/null 2>&1 || true
	done
	# Stop whatever a failed script left running in its stores.
	for s in "$store" ${shm:+"$shm/store"}; do
		if [ -x "$hf" ] && [ -e "$s/registry.sqlite" ]; then
			"$hf" --root "$s" stop --all >/dev/null 2>&1 || true
		fi
	done
	if [ -n "$cgparent" ] && [ -d "$cgparent" ]; then
		# Only empty groups are left once every run stopped; rmdir
		# refuses anything else, deepest first.
		find "$cgparent" -depth -type d -exec rmdir {} + 2>/dev/null || true
	fi
	rm -rf "$work" ${shm:+"$shm"}
	return $rc
}
trap bench_cleanup EXIT

need() {
	for t in "$@"; do
		command -v "$t" >/dev/null || { echo "bench: $t not found (apt-get install -y hyperfine bubblewrap strace)" >&2; exit 2; }
	done
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

build_hostfork() {
	if [ -n "${HOSTFORK_BIN:-}" ]; then
		cp "$HOSTFORK_BIN" "$hf"
		if [ -x "$(dirname "$HOSTFORK_BIN")/hostfork-serve" ]; then
			cp "$(dirname "$HOSTFORK_BIN")/hostfork-serve" "$work/"
		fi
	else
		# hostfork and its companion (serve, mcp) side by side, built as
		# installed (statically linked, decision 77).
		bash "$repo/scripts/build.sh" "$work" >/dev/null
	fi
	(cd "$repo" && go build -o "$hfb" ./bench/hfbench)
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
	echo "hostfork: $("$hf" version | head -1), linked $("$hf" version --json | sed -n 's/.*"link": *"\([a-z]*\)".*/\1/p')${HOSTFORK_BIN:+ (copied from $HOSTFORK_BIN)}; tree $(cd "$repo" && git log -1 --format=%h) ($(cd "$repo" && git status --porcelain | grep -c . || true) files changed in the working tree)"
	echo "store $store ($(df --output=fstype "$work" | tail -1)); cgroup parent ${cgparent:-none}"
}

# tmpfs_store makes a second store on tmpfs (/dev/shm) and sets $shmstore.
tmpfs_store() {
	shm=$(mktemp -d /dev/shm/hostfork-bench.XXXXXX)
	shmstore="$shm/store"
	"$hf" --root "$shmstore" run -- /bin/true
}

# make_tree DIR N: N small files (4 KiB each here and there) in 100-file
# directories, the shape of a source tree, built once and reused.
make_tree() {
	local dir=$1 n=$2
	[ -e "$dir/.done" ] && return
	mkdir -p "$dir"
	python3 - "$dir" "$n" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    sub = os.path.join(d, "d%03d" % (i // 100))
    if i % 100 == 0:
        os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%05d" % i), "w") as f:
        f.write(("%d\n" % i) * (1 + (i % 7) * 100))
PY
	touch "$dir/.done"
}

header() {
	echo "== $1"
	echo "host: $(uname -r), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; load before: $(load); $(date -u +%FT%TZ)"
}
