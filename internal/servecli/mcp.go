package servecli

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"

	"github.com/habemus-papadum/hostfork/internal/cli"
	"github.com/habemus-papadum/hostfork/internal/mcp"
)

func mcpVerb(c *cobra.Command, g *cli.Globals) error {
	ctx, h, done, err := serving(c, g)
	if err != nil {
		return err
	}
	defer done()
	b := cli.ReadBuildInfo()
	return mcp.Run(ctx, h, mcp.Options{Version: b.Version, ExitCode: cli.ExitCodeOf})
}

// serving opens the store for a server verb, with a context that ends at
// SIGTERM or SIGINT; done closes both.
func serving(c *cobra.Command, g *cli.Globals) (context.Context, *hostfork.Host, func(), error) {
	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	h, err := g.Open(ctx)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, h, func() { h.Close(); stop() }, nil
}
