#!/usr/bin/env bash
# Builds hostfork and its companion hostfork-serve the way they are meant
# to be installed: linked statically, with Go's own user and DNS lookups
# and without SQLite's extension loader (docs/decisions.md, entry 77).
#
#   scripts/build.sh DIR       build the binaries into DIR (created if missing)
#   scripts/build.sh --goflags print the flags, quoted for GOFLAGS, e.g.
#       GOFLAGS="$(go env GOFLAGS) $(scripts/build.sh --goflags)" go test ./...
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
# which these replace. The build stamps the commit it was built from
# (-buildvcs=true: 'hostfork version' shows it), so it needs a git checkout.
set -euo pipefail

tags=osusergo,netgo,sqlite_omit_load_extension
ldflags='-linkmode=external -extldflags=-static'

usage() {
	echo "usage: scripts/build.sh DIR | scripts/build.sh --goflags" >&2
	exit 2
}

die() {
	echo "build: $*" >&2
	exit 1
}

# CDPATH would make cd print the directory, and the $(...) take it in.
repo=$(CDPATH='' cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)

[ $# -eq 1 ] || usage
case "$1" in
--goflags)
	printf -- '-tags=%s "-ldflags=%s"\n' "$tags" "$ldflags"
	exit 0
	;;
-* | '') usage ;;
esac

command -v go >/dev/null || die "go not found on PATH"
cc=$(go env CC)
# CC may carry arguments ("ccache gcc"): the program is its first word.
command -v "${cc%% *}" >/dev/null || die "no C compiler ($cc): the SQLite driver needs cgo; install gcc"

mkdir -p -- "$1"
out=$(CDPATH='' cd -- "$1" && pwd)

bins=(hostfork hostfork-serve)
for b in "${bins[@]}"; do
	[ ! -d "$out/$b" ] || die "$out/$b is a directory: move it away, or build into another DIR"
done

# Built beside DIR's files (the same file system, for the rename below)
# and removed on any exit.
tmp=$(mktemp -d -- "$out/.build.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT

if ! (cd "$repo" && CGO_ENABLED=1 go build -buildvcs=true -tags "$tags" -ldflags "$ldflags" -o "$tmp/" "${bins[@]/#/./cmd/}"); then
	die "the static build with $cc failed; a static link needs the C library's static archive (libc.a: Debian's libc6-dev, Fedora's glibc-static)"
fi

# The static link is the point: check it took (hostfork reads its own
# program headers) rather than install a dynamic binary unnoticed.
link=$("$tmp/hostfork" version --json | sed -n 's/.*"link": *"\([a-z]*\)".*/\1/p')
if [ "$link" != static ]; then
	die "$tmp/hostfork is linked '${link:-unknown}', not static"
fi

# Renamed over the old files once both are built: a running copy keeps
# the old file. 0755 whatever the umask: hostfork refuses to execute a
# companion that others could change.
for b in "${bins[@]}"; do
	chmod 0755 -- "$tmp/$b"
done
for b in "${bins[@]}"; do
	mv -fT -- "$tmp/$b" "$out/$b"
done
echo "built ${bins[*]/#/$out/} (static)"
