#!/usr/bin/env bash
# Builds hostfork and its companion hostfork-serve the way they are meant
# to be installed: linked statically, with Go's own user and DNS lookups
# and without SQLite's extension loader (docs/decisions.md, entry 77).
#
#   scripts/build.sh DIR       build both binaries into DIR (created if missing)
#   scripts/build.sh --goflags print the flags, quoted for GOFLAGS, e.g.
#                              GOFLAGS="$(scripts/build.sh --goflags)" go test ./...
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
# build host's glibc at run time. It needs the static C library (libc.a,
# in Debian's libc6-dev, which gcc's cgo builds need anyway).
set -euo pipefail

tags=osusergo,netgo,sqlite_omit_load_extension
ldflags='-linkmode=external -extldflags=-static'

usage() {
	echo "usage: scripts/build.sh DIR | scripts/build.sh --goflags" >&2
	exit 2
}

[ $# -eq 1 ] || usage
case "$1" in
--goflags)
	printf -- '-tags=%s "-ldflags=%s"\n' "$tags" "$ldflags"
	exit 0
	;;
-*) usage ;;
esac

out=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)

command -v go >/dev/null || { echo "build: go not found on PATH" >&2; exit 1; }
cc=$(go env CC)
command -v "$cc" >/dev/null || { echo "build: no C compiler ($cc): the SQLite driver needs cgo; install gcc" >&2; exit 1; }

(cd "$repo" && CGO_ENABLED=1 go build -tags "$tags" -ldflags "$ldflags" -o "$out/" ./cmd/hostfork ./cmd/hostfork-serve)

# The static link is the point: check it took (hostfork reads its own
# program headers) rather than install a dynamic binary unnoticed.
link=$("$out/hostfork" version --json | sed -n 's/.*"link": *"\([a-z]*\)".*/\1/p')
if [ "$link" != static ]; then
	echo "build: $out/hostfork is linked '${link:-unknown}', not static" >&2
	exit 1
fi
echo "built $out/hostfork and $out/hostfork-serve (static)"
