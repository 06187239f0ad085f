// Command hostfork-temporal runs hostfork over Temporal: for now the embedded
// single-node dev server; the node worker (`worker`) and the workflow client
// (`submit`) join as further subcommands of the same root.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hostfork-temporal:", err)
		os.Exit(1)
	}
}
