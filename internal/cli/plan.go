package cli

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
)

func newPlanCmd(g *globals) *cobra.Command {
	f := &envFlags{}
	var asJSON bool
	c := &cobra.Command{
		Use:   "plan [--spec FILE] [flags]",
		Short: "Show what an environment would be, before anything is allocated",
		Long: `plan resolves an environment request against this host and shows each
tree's mechanism and consistency, the view's mounts in the order they are
applied (with nested mounts they hide, overlaps, aliases and the host areas
that stay writable), the effective lifetime and ownership tier, and every
request the host can't honour, with the reason. It exits 121 when the plan
can't run here.`,
		Args: exactArgs(0, "no arguments (use --spec FILE and flags)"),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := f.spec(false)
			if err != nil {
				return err
			}
			h, err := g.backend(c.Context())
			if err != nil {
				return err
			}
			defer h.Close()
			p, err := h.Plan(c.Context(), s)
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(g.out, p); err != nil {
					return err
				}
			} else {
				printPlan(g.out, p)
			}
			if len(p.Unsupported) > 0 {
				return withCode(ExitCapability, nil)
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printPlan(w io.Writer, p *hostfork.Plan) {
	fmt.Fprintf(w, "ownership tier: %s\n", p.Tier)
	field(w, "  note: ", p.TierNote)
	switch {
	case p.UntilStopped:
		fmt.Fprintf(w, "lifetime: until stopped (no deadline), grace %s, owner exit %s\n", p.Grace, p.OwnerExit)
	case p.MaxRuntime > 0:
		fmt.Fprintf(w, "lifetime: max runtime %s from activation (grace %s included), owner exit %s\n", p.MaxRuntime, p.Grace, p.OwnerExit)
		fmt.Fprintf(w, "  deadline enforced by: %s\n", p.DeadlineEnforcer)
	default:
		fmt.Fprintf(w, "lifetime: while its owner runs (owner exit %s), grace %s\n", p.OwnerExit, p.Grace)
	}
	if p.Spec.Lifetime.IdleTimeout > 0 {
		fmt.Fprintf(w, "idle timeout: %s without output or signals (per command tree, from its start; output is seen in files and pipe modes)\n", time.Duration(p.Spec.Lifetime.IdleTimeout))
	}
	if len(p.Trees) > 0 {
		fmt.Fprintln(w, "trees:")
		for _, t := range p.Trees {
			src := t.Source
			if t.Baseline != "" {
				src = "baseline " + t.Baseline + " (" + t.Source + ")"
			}
			fmt.Fprintf(w, "  %s: %s of %s, at %s\n    %s\n", t.Name, t.Kind, src, t.Target, t.Consistency)
		}
	}
	if p.ViewTier != "" {
		fmt.Fprintf(w, "view tier: %s\n", p.ViewTier)
		field(w, "  note: ", p.ViewNote)
	}
	if p.View != nil {
		fmt.Fprintln(w, "view (applied in this order, over the host's mounts with private propagation):")
		for i, r := range p.View.Rules {
			line := fmt.Sprintf("  %d. %s %s", i+1, r.Kind, r.Target)
			if r.Tree != "" {
				line += " <- tree " + r.Tree
			}
			if r.Mkdir {
				line += " (created inside the private layer)"
			}
			fmt.Fprintln(w, line)
			field(w, "     ", r.Note)
			if len(r.Hides) > 0 {
				fmt.Fprintf(w, "     hides host mounts: %s\n", strings.Join(r.Hides, ", "))
			}
		}
		for _, o := range p.View.Overlaps {
			fmt.Fprintf(w, "  overlap: %s\n", o)
		}
		if len(p.View.InheritedWritable) > 0 {
			fmt.Fprintf(w, "  inherited writable host areas: %s\n", strings.Join(p.View.InheritedWritable, ", "))
		}
		for _, l := range []struct {
			what  string
			paths []string
		}{{"private (writes stay in the environment)", p.View.Private}, {"read-only", p.View.ReadOnly}, {"shared (writes reach the host)", p.View.Shared}} {
			if len(l.paths) > 0 {
				fmt.Fprintf(w, "  %s: %s\n", l.what, strings.Join(l.paths, ", "))
			}
		}
	} else {
		fmt.Fprintln(w, "view: the host's own (no private trees or mount changes)")
	}
	if len(p.Limits) > 0 {
		fmt.Fprintln(w, "limits:")
		for _, l := range p.Limits {
			mech := cmp.Or(l.Mechanism, "not enforced")
			fmt.Fprintf(w, "  %s %s via %s: %s\n", l.Resource, l.Value, mech, l.Note)
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if len(p.Unsupported) > 0 {
		fmt.Fprintln(w, "unsupported on this host (the plan can't run):")
		for _, u := range p.Unsupported {
			fmt.Fprintf(w, "  - %s\n", u)
		}
	}
}
