package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/spec"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var specFile string
	var probe, asJSON bool
	c := &cobra.Command{
		Use:   "doctor [--spec FILE] [--probe] [--json]",
		Short: "Check what this host can do, and what to change for what it can't",
		Long: `doctor reports, for this host, each capability hostfork uses: the cgroup
layout and the delegated subtree with its controllers, systemd and its scope
features, mount and user namespaces (sysctls, LSM restrictions, id mapping),
overlay and btrfs support, every storage root (the store, registered
baselines and where their snapshots go) with its filesystem, permissions and
btrfs options, pidfds, the boot id, the store's health (schema, interrupted
allocations, free space), installed support units and the login-shell
capture. Each check says whether it is ok, missing or degraded, whether that
was read from the system or probed, what is missing and the exact remedy.

With --spec FILE it also plans that environment and marks what the plan
needs. --probe proves capabilities by creating disposable resources (a
cgroup with a process cloned into it, a mount namespace, an overlay mount
inside it, a pidfd, a btrfs snapshot in each btrfs storage root, a
login-shell capture) and removes all of them, also on failure.

Without --spec, doctor reads and never creates the store. The exit status is
0 when the plan (without --spec: a default 'hostfork run') can run here, and
121 when it can't; the reasons and remedies are printed.`,
		Args: exactArgs(0, "no arguments (use --spec FILE, --probe, --json)"),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if g.remote() {
				if specFile != "" || probe {
					return usageErr("--spec and --probe can't go with --host: the server reports its host read-only (GET /v1/doctor); run 'hostfork doctor --spec/--probe' on the server's host without --host")
				}
				r, err := remoteDoctor(ctx, g)
				if err != nil {
					return err
				}
				return printDoctorReport(g, r, asJSON, "")
			}
			root := g.root
			if root == "" {
				r, err := hostfork.DefaultRoot()
				if err != nil {
					return err
				}
				root = r
			}
			if abs, err := filepath.Abs(root); err == nil {
				root = abs
			}
			o := doctorOptions(c, g, root)
			o.Probe = probe
			if specFile != "" {
				if err := planForDoctor(c, g, specFile, &o); err != nil {
					return err
				}
			}
			return printDoctorReport(g, doctor.Run(ctx, o), asJSON, specFile)
		},
	}
	c.Flags().StringVar(&specFile, "spec", "", "also plan this environment spec (YAML or JSON) and check what it needs")
	c.Flags().BoolVar(&probe, "probe", false, "prove capabilities by creating disposable resources, and remove them")
	c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return c
}

// printDoctorReport prints a report and exits 121 when the plan can't run.
func printDoctorReport(g *globals, r *doctor.Report, asJSON bool, specFile string) error {
	if asJSON {
		if err := printJSON(g.out, r); err != nil {
			return err
		}
	} else {
		printDoctor(g.out, r, specFile)
	}
	if !r.CanRun {
		return withCode(ExitCapability, nil)
	}
	return nil
}

// remoteDoctor is the report of the server's host (GET /v1/doctor, as
// 'hostfork doctor --json' without --spec or --probe).
func remoteDoctor(ctx context.Context, g *globals) (*doctor.Report, error) {
	b, err := g.backend(ctx)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	r := b.(*remote)
	raw, err := r.Client.Doctor(ctx)
	if err != nil {
		return nil, err
	}
	var rep doctor.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return nil, fmt.Errorf("the doctor report of %s: %w", r.Where(), err)
	}
	return &rep, nil
}

// planForDoctor plans the spec with the library and turns the plan into
// doctor's needs. A capability error (the cgroup2 tier requested where there
// is none) is a finding, not a failure of doctor.
func planForDoctor(c *cobra.Command, g *globals, file string, o *doctor.Options) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return usageErr("--spec: %v", err)
	}
	s, err := spec.Parse(data)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	h, err := hostfork.Open(c.Context(), hostfork.Options{Root: o.Root})
	if err != nil {
		return err
	}
	defer h.Close()
	n := doctor.Needs{Spec: true, Cgroup2: s.Tier == string(hostfork.TierCgroup2), View: !s.View.Empty(), Limits: !s.Limits.Empty(), EnvPolicy: s.EnvPolicy}
	for _, t := range s.Trees {
		n.Overlay = n.Overlay || t.Kind == spec.KindOverlay
		n.Btrfs = n.Btrfs || t.Kind == spec.KindBtrfs
	}
	p, err := h.Plan(c.Context(), *s)
	switch {
	case errors.Is(err, hostfork.ErrUnsupported):
		o.Plan = &doctor.PlanSummary{Error: err.Error()}
	case err != nil:
		return err
	default:
		o.Plan = &doctor.PlanSummary{Tier: string(p.Tier), TierNote: p.TierNote, CgroupParent: p.CgroupParent, Notes: p.Notes, Unsupported: p.Unsupported}
		n.Cgroup2 = p.Tier == hostfork.TierCgroup2
		n.View = p.View != nil
		for _, t := range p.Trees {
			n.TreeSources = append(n.TreeSources, t.Source)
		}
	}
	o.Needs = n
	return nil
}

func printDoctor(w io.Writer, r *doctor.Report, specFile string) {
	f := r.Facts
	who := fmt.Sprintf("uid %d", f.EUID)
	if f.User != "" {
		who = f.User + " (" + who + ")"
	}
	fmt.Fprintf(w, "hostfork doctor: %s, kernel %s, hostfork %s\n", who, f.Kernel, f.Version)
	fmt.Fprintf(w, "evidence: read = from the system; probed = proven by creating and removing a resource")
	if !r.Probed {
		fmt.Fprintf(w, " (add --probe)")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	for _, c := range r.Checks {
		mark := " "
		if c.Required {
			mark = "*"
		}
		fmt.Fprintf(w, "%-8s%s %-6s  %-26s %s\n", c.Status, mark, c.Evidence, c.ID, c.Detail)
		if c.Status != doctor.OK && c.Missing != "" {
			fmt.Fprintf(w, "%44s missing: %s\n", "", c.Missing)
		}
		if c.Status != doctor.OK && c.Remedy != "" {
			fmt.Fprintf(w, "%44s remedy:  %s\n", "", c.Remedy)
		}
	}
	fmt.Fprintln(w, "\n* needed by the "+map[bool]string{true: "plan", false: "default run"}[r.Needs.Spec])
	if p := r.Plan; p != nil {
		fmt.Fprintf(w, "\nplan (%s):\n", specFile)
		field(w, "  ownership tier: ", p.Tier)
		field(w, "    note: ", p.TierNote)
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		field(w, "  can't be planned: ", p.Error)
		for _, u := range p.Unsupported {
			fmt.Fprintf(w, "  unsupported: %s\n", u)
		}
	}
	what := "the default run ('hostfork run -- CMD')"
	if r.Needs.Spec {
		what = "this plan"
	}
	if r.CanRun {
		fmt.Fprintf(w, "\nresult: %s can run here\n", what)
		return
	}
	fmt.Fprintf(w, "\nresult: %s can't run here:\n  - %s\n", what, strings.Join(r.Blockers, "\n  - "))
}

// doctorOptions are the options of a doctor report on store root: where
// the root came from, this binary, its version and verbs.
func doctorOptions(c *cobra.Command, g *globals, root string) doctor.Options {
	source := "--root"
	if g.root == "" {
		source = "$HOSTFORK_ROOT"
		if os.Getenv("HOSTFORK_ROOT") == "" {
			source = "default"
		}
	}
	var o doctor.Options
	o.Root, o.RootSource = root, source
	if exe, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		o.Exe = exe
	}
	if f, path, err := findCompanion("serve"); err == nil {
		f.Close()
		o.Companion = path
	} else {
		o.CompanionErr = err.Error()
	}
	b := ReadBuildInfo()
	o.Version = b.Version + " " + b.Commit
	o.Verbs = map[string]bool{}
	for _, sub := range c.Root().Commands() {
		o.Verbs[sub.Name()] = true
	}
	return o
}
