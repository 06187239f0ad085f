// Command hostfork runs owned command trees on a shared Linux host. Its
// helper processes — the guardian of each command and the keeper of each
// environment with a view — are modes of this same binary, run by a C
// constructor before the Go runtime starts (internal/supervise).
package main

import (
	"os"

	// One P from the first package initialiser on (decisions 54 and 65).
	_ "github.com/habemus-papadum/hostfork/cmd/hostfork/internal/oneproc"

	"github.com/habemus-papadum/hostfork/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
