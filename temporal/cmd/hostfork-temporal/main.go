// Command hostfork-temporal runs hostfork over Temporal: an embedded
// single-node dev server (dev-server), the worker of one node (worker), and
// a client that runs a command through the RunInEnvironment workflow
// (submit). Like every program that imports hostfork, it carries the
// guardian and keeper helpers; nothing is dispatched here.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "hostfork-temporal:", err)
		os.Exit(1)
	}
}
