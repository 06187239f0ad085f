// Package childproc is the one registry of hostfork's self re-exec modes
// (the guardian, later the keeper). main — and TestMain of any test binary
// that launches commands — calls Dispatch before anything else; a matching
// hidden argv[1] runs that mode and exits. Only cmd/hostfork and tests
// import it.
package childproc

import (
	"os"

	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/view"
)

var modes = map[string]func() int{
	supervise.GuardianMode: supervise.GuardianMain,
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
