package servecli

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork/internal/cli"
	"github.com/habemus-papadum/hostfork/internal/mcp"
)

func mcpVerb(c *cobra.Command, g *cli.Globals) error {
	ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	h, err := g.Open(ctx)
	if err != nil {
		return err
	}
	defer h.Close()
	b := cli.ReadBuildInfo()
	return mcp.Run(ctx, h, mcp.Options{Version: b.Version, ExitCode: cli.ExitCodeOf})
}
