// Command hostfork runs owned command trees on a shared Linux host. The
// guardian is a hidden mode of this same binary, dispatched before the CLI
// is set up.
package main

import (
	"os"

	"github.com/habemus-papadum/hostfork/internal/childproc"
	"github.com/habemus-papadum/hostfork/internal/cli"
)

func main() {
	childproc.Dispatch()
	os.Exit(cli.Main(os.Args[1:]))
}
