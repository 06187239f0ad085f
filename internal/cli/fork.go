package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

func newForkCmd(g *globals) *cobra.Command {
	var count int
	var labels []string
	var ttl string
	var asJSON bool
	c := &cobra.Command{
		Use:   "fork ENV [--count N] [--label K=V] [--ttl DUR]",
		Short: "Make environments whose private trees start as ENV's trees at one instant",
		Long: fmt.Sprintf(`fork makes N new environments (--count, 1 to %d) whose private trees start as
ENV's trees at one instant: ENV's commands are frozen (cgroup.freeze of
their group; its guardians and keeper run on), the trees are taken (btrfs:
a snapshot; an overlay upper or a copy: cloned with reflink where the
filesystem can, copied otherwise, and each tree's note says which; a git
worktree: a new branch hostfork/CHILD/TREE at the commit ENV's branch is
at, filled with ENV's files, so ENV's uncommitted changes are the child's),
then ENV is thawed. The freeze window is recorded in each child's "fork" field.
A stopped ENV is forked without a freeze.

Processes are not cloned: each child is a full environment with ENV's spec
(its own trees, view, limits and deadline: ENV's ttl unless --ttl) and no
commands. The children are detached: they outlive this command. It prints
their ids, one a line.`, hostfork.MaxForkCount),
		Args: exactArgs(1, "the id (or unique prefix) of the environment to fork"),
		RunE: func(c *cobra.Command, args []string) error {
			if count < 1 || count > hostfork.MaxForkCount {
				return usageErr("--count %d: give 1 to %d (the most environments one fork makes)", count, hostfork.MaxForkCount)
			}
			o := hostfork.ForkOptions{Count: count, OwnerExit: spec.OwnerExitDetach}
			var err error
			if o.Labels, err = labelsOf(labels); err != nil {
				return err
			}
			if ttl != "" {
				d, err := spec.ParseDuration(ttl)
				if err != nil {
					return usageErr("--ttl: %v", err)
				}
				if d <= 0 {
					return usageErr("--ttl must be positive")
				}
				o.TTL = time.Duration(d)
			}
			h, err := g.backend(c.Context())
			if err != nil {
				return err
			}
			defer h.Close()
			recs, err := h.Fork(c.Context(), args[0], o)
			if asJSON {
				out := make([]hostfork.EnvRecord, 0, len(recs))
				for _, r := range recs {
					out = append(out, hostfork.RedactEnv(r))
				}
				if perr := printJSON(g.out, out); perr != nil {
					return perr
				}
			} else {
				for _, r := range recs {
					fmt.Fprintln(g.out, r.ID)
				}
			}
			return err
		},
	}
	c.Flags().IntVar(&count, "count", 1, fmt.Sprintf("how many environments to make (1 to %d)", hostfork.MaxForkCount))
	c.Flags().StringArrayVar(&labels, "label", nil, "label K=V added to the parent's on every child (repeatable)")
	c.Flags().StringVar(&ttl, "ttl", "", "each child's maximum runtime (default: the parent's)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the children's records as a JSON array")
	return c
}
