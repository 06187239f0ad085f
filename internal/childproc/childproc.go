// Package childproc is the one registry of hostfork's self re-exec modes
// (the guardian, later the keeper). main — and TestMain of any test binary
// that launches commands — calls Dispatch before anything else; a matching
// hidden argv[1] runs that mode and exits. Only cmd/hostfork and tests
// import it.
//
// The guardian is the exception that proves the rule: it is C, dispatched
// by an ELF constructor in internal/supervise (guardian.c) before the Go
// runtime starts, in every binary that links that package. Its entry here
// only runs if that constructor did not: it reports the fault and exits
// 125 rather than letting the guardian's arguments reach the CLI.
package childproc

import (
	"os"

	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/view"
)

var modes = map[string]func() int{
	supervise.GuardianMode: supervise.GuardianNotDispatched,
	view.KeeperMode:        view.KeeperMain,
}

// Dispatch runs the child mode named by os.Args[1], if any, and exits with
// its status. It returns only in the ordinary (non-child) case.
func Dispatch() {
	if len(os.Args) < 2 {
		return
	}
	if fn, ok := modes[os.Args[1]]; ok {
		os.Exit(fn())
	}
}
