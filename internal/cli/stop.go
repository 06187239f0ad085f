package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

func newStopCmd(g *globals) *cobra.Command {
	var grace string
	var asJSON bool
	c := &cobra.Command{
		Use:   "stop ID",
		Short: "Stop a command tree or a whole environment, confirm exit, delete nothing",
		Args:  exactArgs(1, "one environment or command id (a unique prefix is enough)"),
		RunE: func(c *cobra.Command, args []string) error {
			opts := hostfork.StopOptions{Reason: hostfork.ReasonUser}
			if grace != "" {
				d, err := spec.ParseDuration(grace)
				if err != nil {
					return usageErr("--grace: %v", err)
				}
				opts.Grace = d
				if d == 0 {
					opts.Grace = -1
				}
			}
			h, err := g.open(c.Context())
			if err != nil {
				return err
			}
			defer h.Close()
			env, cmd, err := h.Status(c.Context(), args[0])
			if err != nil {
				return err
			}
			if env != nil {
				rec, err := h.StopEnv(c.Context(), env.ID, opts)
				if asJSON && rec != nil {
					if perr := printJSON(g.out, rec); perr != nil {
						return perr
					}
				} else if err == nil {
					fmt.Fprintf(g.out, "stopped environment %s\n", env.ID)
				}
				return err
			}
			rec, err := h.StopCommand(c.Context(), cmd.ID, opts)
			if asJSON && rec != nil {
				if perr := printJSON(g.out, commandView(rec)); perr != nil {
					return perr
				}
			} else if err == nil {
				fmt.Fprintf(g.out, "stopped command %s (tree %s)\n", cmd.ID, rec.TreeState)
			}
			return err
		},
	}
	c.Flags().StringVar(&grace, "grace", "", "time between SIGTERM and SIGKILL (default: the environment's, 2s)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the final record as JSON")
	return c
}
