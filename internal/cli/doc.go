// Package cli is hostfork's command line: cobra commands, one file per
// verb, that turn flags into calls of the hostfork library — in this
// process, or through a running 'hostfork serve' with --host (one backend
// interface over both, backend.go and remote.go) — and map its errors to
// the documented exit codes (docs/exit-codes.md). Only cmd/hostfork
// imports it.
package cli
