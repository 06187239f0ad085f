package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

func newStopCmd(g *globals) *cobra.Command {
	var grace string
	var asJSON, all, abandon bool
	var sf selectorFlags
	c := &cobra.Command{
		Use:   "stop [ID...] [--label K=V]... [--all]",
		Short: "Stop command trees or whole environments, confirm their exit, delete nothing",
		Long: `stop stops each command tree or environment named (ids or unique prefixes),
every active environment and live command with the given labels (--label), or
every active environment (--all, which asks nothing). Each stop sends SIGTERM to
the whole tree, waits the grace, then kills what is left and confirms it is
gone; files stay. It prints what it stopped. A stop that can't confirm a tree's
exit exits 1 and says why; --abandon releases a tree whose exit can never be
verified (its guardian was lost), recording what that gives up.`,
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			sel, err := sf.selector()
			if err != nil {
				return err
			}
			if len(args) == 0 && len(sel) == 0 && !all {
				return usageErr("stop needs ids, --label K=V or --all (see 'hostfork stop --help')")
			}
			if all && (len(args) > 0 || len(sel) > 0) {
				return usageErr("--all stops every active environment; drop the ids and --label")
			}
			opts := hostfork.StopOptions{Reason: hostfork.ReasonUser, Abandon: abandon}
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
			ctx := c.Context()
			type target struct{ kind, id string }
			var targets []target
			seen := map[string]bool{}
			add := func(kind, id string) {
				if !seen[id] {
					seen[id] = true
					targets = append(targets, target{kind, id})
				}
			}
			for _, a := range args {
				kind, id, err := h.Resolve(ctx, a)
				if err != nil {
					return err
				}
				add(kind, id)
			}
			if all || len(sel) > 0 {
				envs, err := h.Envs(ctx, hostfork.EnvFilter{Labels: sel, Active: true})
				if err != nil {
					return err
				}
				for _, e := range envs {
					add("env", e.ID)
				}
			}
			if len(sel) > 0 {
				cmds, err := h.Commands(ctx, hostfork.CommandFilter{Labels: sel, Live: true})
				if err != nil {
					return err
				}
				for _, cm := range cmds {
					if !seen[cm.Env] {
						add("command", cm.ID)
					}
				}
			}
			if len(targets) == 0 {
				if asJSON {
					return printJSON(g.out, []any{})
				}
				fmt.Fprintln(g.err, "hostfork: nothing to stop")
				return nil
			}
			var out []any
			var errs []error
			for _, t := range targets {
				if t.kind == "env" {
					rec, err := h.StopEnv(ctx, t.id, opts)
					if rec != nil {
						out = append(out, hostfork.RedactEnv(*rec))
					}
					if err != nil {
						errs = append(errs, err)
						fmt.Fprintf(g.err, "hostfork: environment %s: %s\n", t.id, errText(err))
						continue
					}
					switch {
					case asJSON:
					case rec.StopReason == "" || rec.StopReason == hostfork.ReasonUser:
						fmt.Fprintf(g.out, "stopped environment %s\n", t.id)
					default: // it had stopped already, for another reason
						fmt.Fprintf(g.out, "stopped environment %s (%s)\n", t.id, rec.StopReason)
					}
					continue
				}
				rec, err := h.StopCommand(ctx, t.id, opts)
				if rec != nil {
					out = append(out, rec)
				}
				if err != nil {
					errs = append(errs, err)
					fmt.Fprintf(g.err, "hostfork: command %s: %s\n", t.id, errText(err))
					continue
				}
				if !asJSON {
					fmt.Fprintf(g.out, "stopped command %s (tree %s)\n", t.id, rec.TreeState)
				}
			}
			if asJSON {
				var v any = out
				if len(args) == 1 && len(sel) == 0 && !all && len(out) == 1 {
					v = out[0]
				}
				if err := printJSON(g.out, v); err != nil {
					return err
				}
			}
			if len(errs) > 0 {
				// Already reported, one line per target.
				return withCode(codeFor(errors.Join(errs...)), nil)
			}
			return nil
		}),
	}
	c.Flags().StringVar(&grace, "grace", "", "time between SIGTERM and SIGKILL (default: the environment's, 2s)")
	c.Flags().BoolVar(&all, "all", false, "stop every active environment (asks nothing)")
	c.Flags().BoolVar(&abandon, "abandon", false, "release a tree whose exit can't be verified, recording what that gives up")
	sf.add(c, "environments and commands")
	c.Flags().BoolVar(&asJSON, "json", false, "print the final record(s) as JSON")
	return c
}
