package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
)

func newPsCmd(g *globals) *cobra.Command {
	var all, asJSON bool
	c := &cobra.Command{
		Use:     "ps",
		Aliases: []string{"list"},
		Short:   "What is running on this node, why, where its output is, whether it is alive and stoppable",
		Args:    exactArgs(0, "no arguments"),
		RunE: g.withHost(func(c *cobra.Command, args []string, h *hostfork.Host) error {
			rows, err := h.List(c.Context(), hostfork.ListOptions{All: all})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.out, rows)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tENV\tSTATE\tPID\tAGE\tSTOP\tPURPOSE\tCOMMAND\tOUTPUT")
			for _, r := range rows {
				pid := "-"
				if r.PID > 0 {
					pid = fmt.Sprint(r.PID)
				}
				state := r.State
				if r.State == hostfork.StateExited {
					if st, ok := exitText(r.ExitCode, r.Signal); ok {
						state += "(" + st + ")"
					}
				}
				stop := "no"
				if r.Stoppable {
					stop = "yes"
				}
				why := r.Purpose
				for k, v := range r.Labels {
					why = strings.TrimSpace(why + " " + k + "=" + v)
				}
				if why == "" {
					why = "-"
				}
				out := r.StdoutPath
				if out == "" {
					out = "(inherited)"
				} else {
					out = strings.TrimSuffix(out, "/stdout") + "/{stdout,stderr}"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Env, state, pid,
					age(r.CreatedAt), stop, why, shortArgv(r.Argv), out)
			}
			return tw.Flush()
		}),
	}
	c.Flags().BoolVar(&all, "all", false, "include exited commands")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func exitText(code, sig *int) (string, bool) {
	switch {
	case code != nil:
		return fmt.Sprintf("%d", *code), true
	case sig != nil:
		return fmt.Sprintf("signal %d", *sig), true
	}
	return "", false
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func shortArgv(argv []string) string {
	s := strings.Join(argv, " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}
