#!/usr/bin/env bash
# Builds hostfork and its companion hostfork-serve the way they are meant
# to be installed: linked statically, with Go's own user and DNS lookups
# and without SQLite's extension loader (docs/decisions.md, entry 77).
#
#   scripts/build.sh DIR       build the binaries into DIR (created if missing)
#   scripts/build.sh --goflags print the flags, quoted for GOFLAGS, e.g.
#       GOFLAGS="$(go env GOFLAGS) $(scripts/build.sh --goflags)" go test ./...
#   scripts/build.sh --env     print the C compiler and flags the build uses,
#       as shell exports, for the same test: (eval "$(scripts/build.sh
#       --env)"; GOFLAGS="$(go env GOFLAGS) $(scripts/build.sh --goflags)"
#       go test ./...)
#   scripts/build.sh --helper FILE
#                              build only the helper, to FILE (tests use it
#                              through HOSTFORK_HELPER)
#
# The third binary, hostfork-helper (decision 80), is hostfork's guardian
# and keeper alone: the same C code the hostfork binary carries, as a
# small static program of its own, linked with musl (Debian's musl-tools)
# when musl-gcc is installed. hostfork starts every command's guardian,
# and every view's keeper, from it when it lies beside hostfork and comes
# from the same build (an id the build writes into both); its start costs
# about 0.15 ms of CPU, against 0.45 ms for the hostfork binary's static
# glibc start (whose CPU probes are slow in a VM). Without musl-gcc no
# helper is built, and both start from hostfork itself, as 'go build' and
# 'go run' builds always do.
#
# A static binary starts about 0.3 ms sooner than the `go build` default
# (no dynamic loader, no shared libc to map and relocate), and a run starts
# two of them: the CLI and the command's guardian. Everything else behaves
# the same: `go run` and `go test` without these flags build the dynamic
# binary, which CI tests too.
#
# The tags keep the static glibc from loading anything at run time:
#   osusergo  os/user reads /etc/passwd and /etc/group itself (hostfork asks
#             getent first where NSS users matter: the login-shell capture);
#   netgo     Go's own DNS resolver (only a remote API address is resolved);
#   sqlite_omit_load_extension  no dlopen: hostfork loads no SQLite extension.
# Without them the static link prints glibc's warnings and would need the
# build host's glibc at run time. It needs gcc and the static C library
# (libc.a: Debian's libc6-dev, which cgo builds need anyway; Fedora's
# glibc-static). Flags already in GOFLAGS stay, except -tags and -ldflags,
# which these replace.
#
# SQLite is compiled with its buddy allocator, memsys5, and the registry
# gives it an arena in the binary's zeroed data (decision 81): a call's
# SQLite memory then costs no malloc set-up or growth, and what the arena
# can't hold spills to malloc. 'hostfork version' says "sqlite: arena
# memory"; builds without the flag use malloc ("system").
set -euo pipefail

tags=osusergo,netgo,sqlite_omit_load_extension
ldflags='-linkmode=external -extldflags=-static'
cflags='-DSQLITE_ENABLE_MEMSYS5'

usage() {
	echo "usage: scripts/build.sh DIR | scripts/build.sh --goflags | scripts/build.sh --env | scripts/build.sh --helper FILE" >&2
	exit 2
}

die() {
	echo "build: $*" >&2
	exit 1
}

# CDPATH would make cd print the directory, and the $(...) take it in.
repo=$(CDPATH='' cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)

# build_helper FILE builds the helper to FILE (mode 0755) and sets
# helper_id to its id (the SHA-256 of the program), which it also appends
# to FILE as its last line. It needs musl-gcc (the caller checks); the C
# files are package supervise's, with the main of HF_HELPER_MAIN
# (hf_ctor.c) instead of the constructor. They need only the C library's
# headers (musl-gcc has no kernel headers). Any failure ends the script.
build_helper() {
	local file=$1
	if ! musl-gcc -static -O2 -Wall -Wextra -DHF_HELPER_MAIN \
		-I "$repo/internal/supervise" -o "$file" "$repo"/internal/supervise/*.c; then
		die "building the helper with musl-gcc failed"
	fi
	helper_id=$(sha256sum -- "$file" | cut -d' ' -f1)
	[[ $helper_id =~ ^[0-9a-f]{64}$ ]] || die "no SHA-256 of $file (sha256sum: '$helper_id')"
	printf '\nhostfork-helper-id %s\n' "$helper_id" >>"$file"
	chmod 0755 -- "$file"
}

# cgo_env sets CC, CGO_CFLAGS and CGO_LDFLAGS for the Go binaries: Go's
# defaults, with SQLite compiled with memsys5 (decision 81).
cgo_env() {
	CC=$(go env CC)
	CGO_CFLAGS="$(go env CGO_CFLAGS) $cflags"
	CGO_LDFLAGS=$(go env CGO_LDFLAGS)
}

[ $# -ge 1 ] || usage
case "$1" in
--goflags)
	[ $# -eq 1 ] || usage
	printf -- '-tags=%s "-ldflags=%s"\n' "$tags" "$ldflags"
	exit 0
	;;
--env)
	[ $# -eq 1 ] || usage
	command -v go >/dev/null || die "go not found on PATH"
	cgo_env
	printf 'export CC=%q CGO_CFLAGS=%q CGO_LDFLAGS=%q\n' "$CC" "$CGO_CFLAGS" "$CGO_LDFLAGS"
	exit 0
	;;
--helper)
	[ $# -eq 2 ] && [ -n "$2" ] || usage
	command -v musl-gcc >/dev/null || die "musl-gcc not found: the helper is built with musl (Debian's musl-tools)"
	build_helper "$2"
	exit 0
	;;
-* | '') usage ;;
esac
[ $# -eq 1 ] || usage

command -v go >/dev/null || die "go not found on PATH"
cgo_env
# CC may carry arguments ("ccache gcc"): the program is its first word.
command -v "${CC%% *}" >/dev/null || die "no C compiler ($CC): the SQLite driver needs cgo; install gcc"

mkdir -p -- "$1"
out=$(CDPATH='' cd -- "$1" && pwd)

# The helper first: a hostfork renamed into place before its helper would
# use itself meanwhile (safe, but slower).
bins=(hostfork-helper hostfork hostfork-serve)
for b in "${bins[@]}"; do
	[ ! -d "$out/$b" ] || die "$out/$b is a directory: move it away, or build into another DIR"
done

# Built beside DIR's files (the same file system, for the rename below)
# and removed on any exit.
tmp=$(mktemp -d -- "$out/.build.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT

gobins=(hostfork hostfork-serve)
if command -v musl-gcc >/dev/null; then
	build_helper "$tmp/hostfork-helper"
	ldflags="$ldflags -X github.com/habemus-papadum/hostfork/internal/supervise.helperID=$helper_id"
else
	echo "build: musl-gcc not found: building no hostfork-helper, so guardians and keepers start from hostfork itself (install musl-tools for a start about 0.3 ms cheaper)" >&2
	bins=("${gobins[@]}")
fi

if ! (cd "$repo" && CGO_ENABLED=1 CC="$CC" CGO_CFLAGS="$CGO_CFLAGS" CGO_LDFLAGS="$CGO_LDFLAGS" go build -tags "$tags" -ldflags "$ldflags" -o "$tmp/" "${gobins[@]/#/./cmd/}"); then
	die "the static build with $CC failed; a static link needs the C library's static archive (libc.a: Debian's libc6-dev, Fedora's glibc-static)"
fi

# The static link is the point: check it took (hostfork reads its own
# program headers) rather than install a dynamic binary unnoticed.
link=$("$tmp/hostfork" version --json | sed -n 's/.*"link": *"\([a-z]*\)".*/\1/p')
if [ "$link" != static ]; then
	die "$tmp/hostfork is linked '${link:-unknown}', not static"
fi

mem=$("$tmp/hostfork" version --json | sed -n 's/.*"sqlite_memory": *"\([a-z]*\)".*/\1/p')
if [ "$mem" != arena ]; then
	die "$tmp/hostfork's SQLite allocates from '${mem:-unknown}', not its arena (CGO_CFLAGS=$cflags did not reach github.com/mattn/go-sqlite3)"
fi

# The helper must run here: called alone, it refuses with status 2.
if [ -e "$tmp/hostfork-helper" ]; then
	st=0
	"$tmp/hostfork-helper" 2>/dev/null || st=$?
	[ "$st" = 2 ] || die "$tmp/hostfork-helper does not run (status $st)"
fi

# Each binary is written in 2 MiB blocks to a new file that is then
# renamed over the old one (entry 78). On a file system that keeps large
# folios (ext4 since Linux 6.16, xfs), a 2 MiB write at a 2 MiB offset
# leaves that part of the file in the page cache as one 2 MiB folio, and
# every process that runs the binary then maps such a part of its code
# with one page-table entry: a CLI call takes hundreds of page faults
# fewer, and its exit unmaps as many fewer pages. 'hostfork doctor' says
# whether the running binary's code is mapped that way. A running copy
# keeps the old file; the renames come after both copies are written.
for b in "${bins[@]}"; do
	dd if="$tmp/$b" of="$tmp/$b.2m" bs=2M status=none || die "writing $tmp/$b.2m failed"
	# 0755 whatever the umask: hostfork refuses to execute a companion or
	# helper that others could change.
	chmod 0755 -- "$tmp/$b.2m"
done
for b in "${bins[@]}"; do
	mv -fT -- "$tmp/$b.2m" "$out/$b"
done
if [ ! -e "$tmp/hostfork-helper" ] && [ -f "$out/hostfork-helper" ]; then
	# Another build's helper: this hostfork would ignore it.
	rm -f -- "$out/hostfork-helper"
fi
echo "built ${bins[*]/#/$out/} (static)"
