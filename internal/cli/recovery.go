package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/spec"
)

func newReapCmd(g *globals) *cobra.Command {
	var asJSON, watch bool
	var interval string
	c := &cobra.Command{
		Use:   "reap [--watch [--interval DUR]]",
		Short: "Finish what a crash interrupted: settle records, stop expired or orphaned environments",
		Long: `reap reconciles the ledger with what exists: it settles command records from
guardian receipts and kernel evidence, stops environments whose deadline
passed, whose owner is gone (owner-exit stop) or whose keeper is lost,
completes interrupted stops and creations, and settles intents that never
produced a resource. It is idempotent and safe beside live runs and other
reapers. It exits 0 even with pending items (they are listed with
reasons), and 1 when a stop it attempted did not finish (action
stop-failed, also listed as pending).

With --watch it reaps every --interval (default 1m) until SIGINT or SIGTERM,
printing one report per pass and carrying on after a failed pass: the way to
run the reaper under your own supervisor where there is no systemd timer
(see 'hostfork support plan').`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			every := time.Minute
			if interval != "" {
				if !watch {
					return usageErr("--interval needs --watch")
				}
				d, err := spec.ParseDuration(interval)
				if err != nil || d < time.Second {
					return usageErr("--interval: want a duration of at least 1s, like 30s or 1m (got %q)", interval)
				}
				every = d
			}
			h, err := g.backend(c.Context())
			if err != nil {
				return err
			}
			defer h.Close()
			if watch {
				return reapWatch(c.Context(), g, h, every, asJSON)
			}
			rep, err := h.Reap(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(g.out, rep); err != nil {
					return err
				}
			} else {
				printReap(g, rep)
			}
			return reapFailed(rep)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (with --watch: one object per line and pass)")
	c.Flags().BoolVar(&watch, "watch", false, "keep reaping every --interval until SIGINT or SIGTERM")
	c.Flags().StringVar(&interval, "interval", "", "time between passes with --watch (default 1m)")
	return c
}

// reapWatch reaps every interval until ctx ends or SIGINT/SIGTERM arrives.
// A failed pass is reported and the next one runs.
func reapWatch(ctx context.Context, g *globals, h backend, every time.Duration, asJSON bool) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if !asJSON {
		fmt.Fprintf(g.out, "reaping %s every %v until SIGINT or SIGTERM\n", h.Where(), every)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		rep, err := h.Reap(ctx)
		now := time.Now().UTC().Format(time.RFC3339)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(g.err, "hostfork: %s reap failed: %v\n", now, err)
		case asJSON:
			b, _ := json.Marshal(struct {
				At string `json:"at"`
				*hostfork.ReapReport
			}{now, rep})
			fmt.Fprintf(g.out, "%s\n", b)
		default:
			fmt.Fprintf(g.out, "%s ", now)
			printReap(g, rep)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// reapFailed is the error of a reap one of whose stops did not finish
// (exit 1); pending items alone are not a failure.
func reapFailed(rep *hostfork.ReapReport) error {
	n := 0
	for _, a := range rep.Actions {
		if a.Action == api.ReapStopFailed {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d stop(s) this reap attempted did not finish (listed as pending, with the reason); run 'hostfork reap' again, or see 'hostfork status ID': %w", n, hostfork.ErrUnverified)
}

func printReap(g *globals, rep *hostfork.ReapReport) {
	fmt.Fprintf(g.out, "checked %d environment(s): %d action(s), %d pending\n", rep.Checked, len(rep.Actions), len(rep.Pending))
	for _, a := range rep.Actions {
		who := a.Env
		if a.Command != "" {
			who += "/" + a.Command
		}
		fmt.Fprintf(g.out, "  %s %s %s\n", a.Action, who, a.Detail)
	}
	for _, p := range rep.Pending {
		fmt.Fprintf(g.out, "  pending %s %s: %s\n", p.Env, p.What, p.Reason)
	}
}

func newGCCmd(g *globals) *cobra.Command {
	var asJSON, dry, delBranches bool
	var trees, evidence string
	var force []string
	c := &cobra.Command{
		Use:   "gc [--dry-run] [--retain-trees DUR] [--retain-evidence DUR] [--force ENV]... [--delete-branches]",
		Short: "Apply retention: delete private trees and evidence of stopped environments",
		Long: `gc deletes what retention allows, counted from each environment's confirmed
stop: private trees (default 1 day) and then evidence — records, logs,
receipts, manifests, exports (default 7 days) — configured in config.yaml
under the store root, overridable per environment and per call. Holds (an
unfinished export, a tree another environment builds on, unverified
commands, a worktree with uncommitted changes) are reported. Borrowed
baselines are never deleted. A worktree tree is removed with 'git worktree
remove' and 'git worktree prune'; its branch stays unless --delete-branches.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			opts := hostfork.GCOptions{DryRun: dry, Force: force, DeleteBranches: delBranches}
			for _, x := range []struct {
				flag, val string
				dst       **time.Duration
			}{{"--retain-trees", trees, &opts.RetainTrees}, {"--retain-evidence", evidence, &opts.RetainEvidence}} {
				if x.val == "" {
					continue
				}
				d, err := spec.ParseDuration(x.val)
				if err != nil {
					return usageErr("%s: %v", x.flag, err)
				}
				*x.dst = &d
			}
			h, err := g.backend(c.Context())
			if err != nil {
				return err
			}
			defer h.Close()
			rep, err := h.GC(c.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(g.out, rep); err != nil {
					return err
				}
			} else {
				verb := "deleted"
				if dry {
					verb = "would delete"
				}
				for _, d := range rep.Deleted {
					fmt.Fprintf(g.out, "%s %s %s (%s)\n", verb, d.Env, d.What, d.Reason)
				}
				for _, d := range rep.Held {
					fmt.Fprintf(g.out, "held %s %s: %s\n", d.Env, d.What, d.Reason)
				}
				for _, d := range rep.Errors {
					fmt.Fprintf(g.out, "error %s %s: %s\n", d.Env, d.What, d.Reason)
				}
				if len(rep.Deleted)+len(rep.Held)+len(rep.Errors) == 0 {
					fmt.Fprintln(g.out, "nothing is due")
				}
			}
			if len(rep.Errors) > 0 {
				return withCode(ExitFailed, nil)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&dry, "dry-run", false, "report, delete nothing")
	c.Flags().StringVar(&trees, "retain-trees", "", "keep trees this long after stop, for this call")
	c.Flags().StringVar(&evidence, "retain-evidence", "", "keep evidence this long after stop, for this call")
	c.Flags().StringArrayVar(&force, "force", nil, "discard this stopped environment's trees and evidence now (repeatable)")
	c.Flags().BoolVar(&delBranches, "delete-branches", false, "also delete the branch of each worktree tree removed")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newUsageCmd(g *globals) *cobra.Command {
	var asJSON, btrfsSizes bool
	c := &cobra.Command{
		Use:   "usage",
		Short: "Active and retained runs, bytes, pools, cleanup backlog, failures",
		Args:  exactArgs(0, "no arguments"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			u, err := h.Usage(c.Context())
			if err != nil {
				return err
			}
			var sizes []hostfork.BtrfsSize
			if btrfsSizes {
				if sizes, err = h.BtrfsSizes(c.Context()); err != nil {
					return err
				}
			}
			if asJSON {
				if btrfsSizes {
					// The usage's own keys, and the measurement beside them.
					if sizes == nil {
						sizes = []hostfork.BtrfsSize{}
					}
					return printJSON(g.out, struct {
						*hostfork.Usage
						BtrfsSizes []hostfork.BtrfsSize `json:"btrfs_sizes"`
					}{u, sizes})
				}
				return printJSON(g.out, u)
			}
			defer func() {
				for _, s := range sizes {
					if s.Error != "" {
						fmt.Fprintf(g.out, "btrfs %s/%s: %s\n", s.Env, s.Tree, s.Error)
						continue
					}
					fmt.Fprintf(g.out, "btrfs %s/%s: %s exclusive, %s shared, %s total (measured %s)\n", s.Env, s.Tree, doctor.Human(s.Exclusive), doctor.Human(s.Shared), doctor.Human(s.Total), s.MeasuredAt.Local().Format(time.RFC3339))
				}
			}()
			fmt.Fprintf(g.out, "environments: %d active, %d retained, %d failed\n", u.ActiveEnvs, u.RetainedEnvs, u.FailedEnvs)
			fmt.Fprintf(g.out, "commands:     %d alive, %d unverified\n", u.LiveCommands, u.UnverifiedCmds)
			fmt.Fprintf(g.out, "logs:         %s (apparent)\nexports:      %s (apparent)\n", doctor.Human(u.LogBytes), doctor.Human(u.ExportBytes))
			fmt.Fprintf(g.out, "trees:        %s\n", countsByKind(u.TreesByKind))
			for _, p := range u.Pools {
				fmt.Fprintf(g.out, "pool %s (%s): %s free of %s, %d tree(s)\n", p.Path, p.FSType, doctor.Human(int64(p.FreeBytes)), doctor.Human(int64(p.TotalBytes)), p.Trees)
			}
			fmt.Fprintf(g.out, "cleanup backlog: %d", u.CleanupBacklog)
			if u.OldestBacklog > 0 {
				fmt.Fprintf(g.out, " (oldest overdue %s)", u.OldestBacklog)
			}
			fmt.Fprintf(g.out, "\nfailed operations: %d; pending intents: %d\npending reclamation: %s\n", u.FailedOperations, u.PendingIntents, u.PendingReclamation)
			return nil
		}),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&btrfsSizes, "btrfs-sizes", false, "also measure each Btrfs tree's exclusive and shared bytes (slow; stamped with the time measured)")
	return c
}

// countsByKind prints counts per kind in a stable order ("none" when
// empty): "btrfs 2, overlay 1".
func countsByKind(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	kinds := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", clean(k), m[k]))
	}
	return strings.Join(parts, ", ")
}
