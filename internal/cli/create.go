package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
)

func newCreateCmd(g *globals) *cobra.Command {
	f := &envFlags{}
	var asJSON bool
	c := &cobra.Command{
		Use:   "create [--spec FILE] (--ttl DUR | --until-stopped) [flags]",
		Short: "Create a persistent environment and print its id",
		Long: `create allocates an environment (trees, view, budget, deadline) and prints
its id. Run commands in it with 'hostfork exec ID -- CMD', again and again;
stop it with 'hostfork stop ID' (which deletes no file). The environment
outlives this command, so an expiry (--ttl) or --until-stopped is required.`,
		Args: exactArgs(0, "no arguments (use --spec FILE and flags)"),
		RunE: func(c *cobra.Command, args []string) error {
			if f.ttl == "" && !f.untilStopped && f.specFile == "" {
				return usageErr("create needs --ttl DUR or --until-stopped: the environment outlives this command")
			}
			s, err := f.spec(true)
			if err != nil {
				return err
			}
			h, err := g.backend(c.Context())
			if err != nil {
				return err
			}
			defer h.Close()
			if err := f.recapture(c.Context(), g, h); err != nil {
				return err
			}
			p, err := h.Plan(c.Context(), s)
			if err != nil {
				return err
			}
			env, err := h.Create(c.Context(), p)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.out, hostfork.RedactEnv(*env))
			}
			fmt.Fprintln(g.out, env.ID)
			return nil
		},
	}
	f.add(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print the environment's record as JSON")
	return c
}
