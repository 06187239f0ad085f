// Package cli is hostfork's command line: cobra commands, one file per
// verb, that turn flags into calls of the hostfork library — in this
// process, or through a running 'hostfork serve' with --host (one Backend
// interface over both: backend.go here, package remotecli for a server,
// which only the companion links) — and map its errors to the documented
// exit codes (docs/exit-codes.md). cmd/hostfork and the companion's
// packages (servecli, remotecli) import it.
package cli
