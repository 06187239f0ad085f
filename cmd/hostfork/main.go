// Command hostfork runs owned command trees on a shared Linux host. Its
// helper processes — the guardian of each command and the keeper of each
// environment with a view — are modes of this same binary, run by a C
// constructor before the Go runtime starts (internal/supervise).
package main

import (
	"os"
	"runtime"

	"github.com/habemus-papadum/hostfork/internal/cli"
)

func main() {
	// One CLI call is one short, mostly waiting goroutine tree: a second P
	// only adds a spinning thread, which a hundred concurrent calls pay on
	// every core (decision 54). GOMAXPROCS in the environment still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	os.Exit(cli.Main(os.Args[1:]))
}
