package hostfork

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/internal/plan"
	"github.com/habemus-papadum/hostfork/internal/view"
	"github.com/habemus-papadum/hostfork/spec"
)

// Ownership tiers (DESIGN.md, "Ownership tiers").
const (
	TierCgroup2   = "cgroup2"
	TierSubreaper = "subreaper"
)

// PlannedTree is one private tree as planned.
type PlannedTree struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Baseline string `json:"baseline,omitempty"`
	Source   string `json:"source"`
	// Target is the path the workload uses.
	Target string `json:"target"`
	// Consistency says what the tree guarantees about its contents.
	Consistency string `json:"consistency"`
}

// Plan is a resolved request: what Create will do, decided before anything
// is allocated. A plan with Unsupported entries can't be created.
type Plan struct {
	Spec spec.Environment `json:"spec"`
	// Tier is the ownership tier the environment gets.
	Tier string `json:"tier"`
	// TierNote says why, and what is weaker, when not cgroup2.
	TierNote     string        `json:"tier_note,omitempty"`
	CgroupParent string        `json:"cgroup_parent,omitempty"`
	MaxRuntime   time.Duration `json:"max_runtime_ns,omitempty"`
	Grace        time.Duration `json:"grace_ns"`
	OwnerExit    string        `json:"owner_exit"`
	UntilStopped bool          `json:"until_stopped"`
	// ScopeManager is the systemd manager of the systemd-scope tier.
	ScopeManager string `json:"scope_manager,omitempty"`
	// DeadlineEnforcer names what enforces the deadline independently of
	// the registry and the caller.
	DeadlineEnforcer string `json:"deadline_enforcer,omitempty"`

	Trees  []PlannedTree  `json:"trees,omitempty"`
	Limits []PlannedLimit `json:"limits,omitempty"`
	View   *plan.Result   `json:"view,omitempty"`
	Notes  []string       `json:"notes,omitempty"`
	// Unsupported lists requests this host can't honour, with the reason.
	Unsupported []string `json:"unsupported,omitempty"`

	baselines map[string]*baselineInfo
}

// Plan validates s against this host and resolves it. Errors are for
// malformed requests; what the host can't do is listed in Unsupported.
func (h *Host) Plan(ctx context.Context, s spec.Environment) (*Plan, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	caps := h.Capabilities()
	p := &Plan{
		Spec:         s,
		MaxRuntime:   time.Duration(s.Lifetime.MaxRuntime),
		Grace:        time.Duration(s.Lifetime.Grace),
		OwnerExit:    s.Lifetime.OwnerExit,
		UntilStopped: s.Lifetime.UntilStopped,
		baselines:    map[string]*baselineInfo{},
	}
	switch s.Tier {
	case TierSystemdScope:
		if err := h.planScope(ctx, p); err != nil {
			return nil, err
		}
	case TierCgroup2:
		if !caps.Cgroup2 {
			return nil, fmt.Errorf("the cgroup2 ownership tier was requested but %s; run as root on a host with a writable cgroup2 mount, or choose --tier subreaper explicitly: %w", caps.Cgroup2Reason, ErrCapability)
		}
		p.Tier = TierCgroup2
	case TierSubreaper:
		p.Tier = TierSubreaper
		p.TierNote = "subreaper chosen explicitly: orphans are adopted and reaped, but a process that leaves the tree is not owned and there is no kernel tree-exit proof"
	default:
		if systemdBooted() && h.planScope(ctx, p) == nil {
			break // under systemd, environments are its delegated scopes
		}
		if caps.Cgroup2 {
			p.Tier = TierCgroup2
		} else {
			p.Tier = TierSubreaper
			p.TierNote = "weaker subreaper tier (" + caps.Cgroup2Reason + "): orphans are adopted and reaped, but there is no kernel tree-exit proof"
		}
	}
	if p.Tier == TierCgroup2 {
		p.CgroupParent = caps.CgroupParent
	}
	if p.MaxRuntime > 0 {
		p.DeadlineEnforcer = "guardian timers (and the keeper's, with a view): independent of the registry, storage and caller; 'hostfork reap' is the backstop"
	}
	if err := h.planView(ctx, p); err != nil {
		return nil, err
	}
	if err := h.planLimits(p); err != nil {
		return nil, err
	}
	return p, nil
}

func (h *Host) planView(ctx context.Context, p *Plan) error {
	s := &p.Spec
	if s.View.Empty() {
		return nil
	}
	if os.Geteuid() != 0 {
		p.Unsupported = append(p.Unsupported, "a view needs a private mount namespace, which needs root here (rootless views through user namespaces are not implemented yet)")
	}
	mounts, err := view.ReadMountinfo()
	if err != nil {
		return fmt.Errorf("reading the host's mounts: %w", err)
	}
	facts := plan.Facts{
		Resolve: func(p string) (string, bool) {
			r, err := filepath.EvalSymlinks(p)
			if err != nil {
				return p, false
			}
			return r, true
		},
		Protected: []string{h.root},
	}
	if exe, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		if strings.Contains(exe, "/go-build") {
			p.Notes = append(p.Notes, "the hostfork binary "+exe+" is a temporary 'go run'/'go test' build; it is not protected from the view")
		} else {
			facts.Protected = append(facts.Protected, exe)
		}
	}
	for _, m := range mounts {
		facts.Mounts = append(facts.Mounts, plan.Mount{Target: m.Target, FSType: m.FSType, Options: m.Options})
	}
	res, err := plan.View(s, facts)
	if err != nil {
		return err
	}
	// replace and scratch mount a directory: refuse a file target now,
	// before anything is allocated.
	for _, r := range res.Rules {
		if (r.Kind == plan.Replace || r.Kind == plan.Scratch) && !r.Mkdir {
			if st, err := os.Stat(r.Target); err == nil && !st.IsDir() {
				return fmt.Errorf("view %s: %s is a file; %s takes a directory: %w", r.Kind, r.Target, r.Kind, ErrInvalid)
			}
		}
	}
	p.View = res
	names := make([]string, 0, len(s.Trees))
	for n := range s.Trees {
		names = append(names, n)
	}
	sort.Strings(names)
	targetOf := map[string]string{}
	for _, r := range res.Rules {
		if r.Tree != "" {
			targetOf[r.Tree] = r.Target
		}
	}
	for _, n := range names {
		t := s.Trees[n]
		pt := PlannedTree{Name: n, Kind: t.Kind, Baseline: t.Baseline, Source: t.Source, Target: targetOf[n]}
		if err := h.planTree(ctx, p, &pt); err != nil {
			return err
		}
		p.Trees = append(p.Trees, pt)
	}
	return nil
}
