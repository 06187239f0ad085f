package doctor

import (
	"cmp"
	"context"
	"fmt"
	"strings"
)

// Status is a check's outcome.
type Status string

// Statuses. Skipped is only for probes that had nothing to probe.
const (
	OK       Status = "ok"
	Missing  Status = "missing"
	Degraded Status = "degraded"
	Skipped  Status = "skipped"
)

// Evidence says how a check knows.
type Evidence string

// Evidence levels.
const (
	// Read: from files the system exposes; nothing was created.
	Read Evidence = "read"
	// Probed: proven by creating a disposable resource and removing it.
	Probed Evidence = "probed"
)

// Check is one finding.
type Check struct {
	ID       string   `json:"id"`
	Title    string   `json:"title"`
	Status   Status   `json:"status"`
	Evidence Evidence `json:"evidence"`
	// Detail is what was found.
	Detail string `json:"detail"`
	// Missing says what is lacking, when Status is not ok.
	Missing string `json:"missing,omitempty"`
	// Remedy is the exact change: a command or a configuration line.
	Remedy string `json:"remedy,omitempty"`
	// Required is set when the requested plan (or the default run) needs
	// this; a required check that is missing blocks it.
	Required bool `json:"required"`
}

// Needs is what the requested plan requires of the host. Without a spec it
// is the default run's: a usable store, pidfds and a boot id.
type Needs struct {
	// Spec is set when a spec was given.
	Spec bool `json:"spec"`
	// Cgroup2 is set when the plan's ownership tier is cgroup2 (chosen or
	// requested).
	Cgroup2 bool `json:"cgroup2"`
	// View is set when the plan needs a private mount namespace.
	View    bool `json:"view"`
	Overlay bool `json:"overlay"`
	Btrfs   bool `json:"btrfs"`
	Limits  bool `json:"limits"`
	// TreeSources are the plan's tree sources (baselines or paths).
	TreeSources []string `json:"tree_sources,omitempty"`
	// EnvPolicy is the spec's launch environment policy.
	EnvPolicy string `json:"env_policy,omitempty"`
}

// PlanSummary is the library's plan as doctor needs it: the CLI fills it
// from hostfork.Host.Plan.
type PlanSummary struct {
	Tier         string   `json:"tier,omitempty"`
	TierNote     string   `json:"tier_note,omitempty"`
	CgroupParent string   `json:"cgroup_parent,omitempty"`
	Notes        []string `json:"notes,omitempty"`
	// Unsupported lists requests the host can't honour, with the reason
	// and the fix, as the planner wrote them.
	Unsupported []string `json:"unsupported,omitempty"`
	// Error is a capability error that stopped planning (for example the
	// cgroup2 tier requested where there is none).
	Error string `json:"error,omitempty"`
}

// Report is doctor's answer.
type Report struct {
	Facts  *Facts       `json:"facts"`
	Needs  Needs        `json:"needs"`
	Plan   *PlanSummary `json:"plan,omitempty"`
	Probed bool         `json:"probed"`
	Checks []Check      `json:"checks"`
	// CanRun says whether the requested plan (or, without a spec, the
	// default run) can run here; Blockers say why not, with remedies.
	CanRun   bool     `json:"can_run"`
	Blockers []string `json:"blockers,omitempty"`
}

// Options configure Run.
type Options struct {
	ReadOptions
	Needs Needs
	Plan  *PlanSummary
	// Probe creates and removes disposable resources to prove what the
	// read checks only infer.
	Probe bool
}

// Run reads the host, evaluates it against the needs, probes when asked,
// and decides.
func Run(ctx context.Context, o Options) *Report {
	f := ReadFacts(ctx, o.ReadOptions)
	r := &Report{Facts: f, Needs: o.Needs, Plan: o.Plan, Probed: o.Probe}
	r.Checks = Evaluate(f, o.Needs)
	if o.Probe {
		r.Checks = append(r.Checks, RunProbes(ctx, f, o.Needs)...)
	}
	r.CanRun, r.Blockers = Verdict(r.Checks, o.Plan)
	return r
}

// Verdict decides whether the plan can run: every required check must not
// be missing, and the plan must have no unsupported request or error.
// Blockers name what is missing and the remedy.
func Verdict(checks []Check, p *PlanSummary) (bool, []string) {
	var out []string
	for _, c := range checks {
		if !c.Required || c.Status != Missing {
			continue
		}
		b := c.ID + ": " + cmp.Or(c.Missing, c.Detail)
		if c.Remedy != "" {
			b += " — remedy: " + c.Remedy
		}
		out = append(out, b)
	}
	if p != nil {
		if p.Error != "" {
			out = append(out, "plan: "+p.Error)
		}
		for _, u := range p.Unsupported {
			out = append(out, "plan: "+u)
		}
	}
	return len(out) == 0, out
}

// Find returns the check with id, or nil.
func (r *Report) Find(id string) *Check {
	for i := range r.Checks {
		if r.Checks[i].ID == id {
			return &r.Checks[i]
		}
	}
	return nil
}

// Human formats a byte count.
func Human[N int64 | uint64](n N) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := N(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func join(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
