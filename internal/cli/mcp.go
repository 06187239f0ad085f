package cli

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork/internal/mcp"
)

func newMCPCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve hostfork's tools to a coding agent (Model Context Protocol on stdio)",
		Long: `mcp is a Model Context Protocol server on stdin/stdout with the tools run,
create, start, ps, status, logs, stop and export (docs/api.md, "MCP"). Every
call is bounded: environments expire after a ttl (default 10m) unless the
agent asks for until_stopped explicitly; a run ends with its environment.
Configure it in an agent as the command 'hostfork mcp' (with --root or
HOSTFORK_ROOT for another store).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			h, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer h.Close()
			b := ReadBuildInfo()
			return mcp.Run(ctx, h, mcp.Options{Version: b.Version, ExitCode: ExitCodeOf})
		},
	}
}
