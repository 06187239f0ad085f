package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func newEventsCmd(g *globals) *cobra.Command {
	var since int64
	var follow, asJSON bool
	c := &cobra.Command{
		Use:   "events [--since N] [--follow] [--json]",
		Short: "The registry's numbered event log: environments, commands, stops, deadlines, OOM, reaps",
		Long: `events prints the registry's durable event log in order: environments
created and stopped, commands started, their leaders and trees exiting,
deadlines, idle timeouts, OOM kills, stop decisions and reap actions. Every
event has a sequence number; --since N prints those after N, so a reader that
remembers the last number it saw resumes without missing or repeating any.
--follow keeps printing new events until interrupted. --json prints one JSON
object per line.`,
		Args: exactArgs(0, "no arguments"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			if since < 0 {
				return usageErr("--since %d: give a sequence number, 0 for all", since)
			}
			ctx, cancel := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			enc := json.NewEncoder(g.out)
			for ev, err := range h.Events(ctx, since, follow) {
				if err != nil {
					if errors.Is(err, context.Canceled) {
						return nil
					}
					return err
				}
				if asJSON {
					if err := enc.Encode(ev); err != nil {
						return err
					}
					continue
				}
				line := fmt.Sprintf("%d\t%s\t%s\t%s", ev.Seq, ev.At.Local().Format("2006-01-02T15:04:05.000"), ev.Kind, ev.Env)
				if ev.Command != "" {
					line += "\t" + ev.Command
				}
				if ev.Reason != "" {
					line += "\treason=" + string(ev.Reason)
				}
				if st, ok := exitText(ev.ExitCode, ev.Signal); ok {
					line += "\texit=" + st
				}
				if ev.Detail != "" {
					line += "\t" + clean(ev.Detail)
				}
				fmt.Fprintln(g.out, line)
			}
			return nil
		}),
	}
	c.Flags().Int64Var(&since, "since", 0, "print the events after this sequence number")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events as they are recorded")
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	return c
}
