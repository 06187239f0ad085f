// Command hostfork-serve is hostfork's companion binary: the hostfork CLI
// with 'serve' (the HTTP API, events and metrics) and 'mcp' (the Model
// Context Protocol server) in this process. 'hostfork serve' and
// 'hostfork mcp' execute it from beside the hostfork executable or from
// PATH, so that the hostfork binary, started at every CLI call, links
// none of the server's dependencies. Build both together, as installed
// (statically linked, docs/decisions.md entry 77):
//
//	scripts/build.sh DIR
//
// or, for development, go build -o DIR/ ./cmd/hostfork ./cmd/hostfork-serve.
package main

import (
	"os"

	"github.com/habemus-papadum/hostfork/internal/servecli"
)

func main() {
	os.Exit(servecli.Main(os.Args[1:]))
}
