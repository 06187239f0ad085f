package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
)

type globals struct {
	root string
	out  io.Writer
	err  io.Writer
}

func (g *globals) open(ctx context.Context) (*hostfork.Host, error) {
	return hostfork.Open(ctx, hostfork.Options{Root: g.root})
}

// withHost wraps a verb that needs the store: it opens it, runs fn, and
// closes it.
func (g *globals) withHost(fn func(c *cobra.Command, args []string, h *hostfork.Host) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		h, err := g.open(c.Context())
		if err != nil {
			return err
		}
		defer h.Close()
		return fn(c, args, h)
	}
}

// NewRoot builds the hostfork command tree.
func NewRoot(stdout, stderr io.Writer) (*cobra.Command, *globals) {
	g := &globals{out: stdout, err: stderr}
	root := &cobra.Command{
		Use:   "hostfork",
		Short: "Run owned command trees on a shared Linux host, with durable records",
		Long: `hostfork runs commands in environments that own their whole process tree,
bounds them with deadlines, and keeps durable records of what ran, why, where
its output is, whether it is alive and whether it can be stopped.

Exit codes: run/exec exit with the command's status (128+N for signal N);
hostfork's own failures use 117-127 (see docs/exit-codes.md).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.root, "root", "", "store directory (default $HOSTFORK_ROOT, /var/lib/hostfork for root, else ~/.local/state/hostfork)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%v (see '%s --help')", err, c.CommandPath())
	})
	root.AddCommand(newRunCmd(g), newPsCmd(g), newEnvsCmd(g), newStatusCmd(g), newLogsCmd(g), newStopCmd(g), newEventsCmd(g), newVersionCmd(g),
		newPlanCmd(g), newCreateCmd(g), newExecCmd(g), newShellCmd(g), newBaselineCmd(g),
		newReapCmd(g), newGCCmd(g), newUsageCmd(g), newExportCmd(g),
		newCapacityCmd(g), newPauseCmd(g, true), newPauseCmd(g, false))
	root.AddCommand(newDoctorCmd(g))
	root.AddCommand(newSupportCmd(g))
	root.AddCommand(newServeCmd(g), newMCPCmd(g))
	return root, g
}

// Main runs the CLI and returns the process exit status.
func Main(args []string) int {
	root, g := NewRoot(os.Stdout, os.Stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) && (strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag")) {
		fmt.Fprintf(g.err, "hostfork: %v (see 'hostfork --help')\n", err)
		return ExitUsage
	}
	return report(g.err, err)
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr("%s takes %s (see '%s --help')", c.CommandPath(), what, c.CommandPath())
		}
		return nil
	}
}
