package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

func newExtendCmd(g *globals) *cobra.Command {
	var ttl, until string
	var asJSON bool
	c := &cobra.Command{
		Use:   "extend ENV (--ttl D | --until RFC3339)",
		Short: "Move an environment's deadline later or earlier",
		Long: `extend moves the deadline of environment ENV: to D from now (--ttl 30m) or to
an instant (--until 2026-12-07T18:00:00Z). Later and earlier are both moves; an
earlier deadline stops the environment then, with reason "deadline". The move is
recorded (the record's deadline_moves, an env.deadline_moved event), and the
environment's guardians, keeper and systemd scope hold the new deadline before
extend returns. The store's lifetime.max (config.yaml), counted from the
environment's activation, bounds how late it may be.`,
		Args: exactArgs(1, "an environment id"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			var o hostfork.ExtendOptions
			switch {
			case (ttl == "") == (until == ""):
				return usageErr("extend needs exactly one of --ttl D (from now, e.g. 30m) and --until RFC3339")
			case ttl != "":
				d, err := spec.ParseDuration(ttl)
				if err != nil || d <= 0 {
					return usageErr("--ttl %q: give a positive duration from now, e.g. 30m or 2h", ttl)
				}
				o.TTL = hostfork.Duration(d)
			default:
				at, err := time.Parse(time.RFC3339, until)
				if err != nil {
					return usageErr("--until %q: give an RFC 3339 instant, e.g. %s", until, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
				}
				o.Until = &at
			}
			before, _, err := h.Status(c.Context(), args[0])
			if err != nil {
				return err
			}
			rec, err := h.Extend(c.Context(), before.ID, o)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.out, rec)
			}
			from := "none"
			if before.DeadlineAt != nil {
				from = before.DeadlineAt.UTC().Format(time.RFC3339)
			}
			_, err = fmt.Fprintf(g.out, "%s: deadline moved from %s to %s\n", rec.ID, from, rec.DeadlineAt.UTC().Format(time.RFC3339))
			return err
		}),
	}
	c.Flags().StringVar(&ttl, "ttl", "", "the new deadline, this long from now (e.g. 30m)")
	c.Flags().StringVar(&until, "until", "", "the new deadline, an RFC 3339 instant")
	c.Flags().BoolVar(&asJSON, "json", false, "print the environment's record as JSON")
	return c
}
