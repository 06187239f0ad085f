package hostfork

import (
	"context"
	"fmt"
	"time"

	"github.com/habemus-papadum/hostfork/spec"
)

// Ownership tiers (DESIGN.md, "Ownership tiers").
const (
	TierCgroup2   = "cgroup2"
	TierSubreaper = "subreaper"
)

// Plan is a resolved request: what Create will do, decided before anything
// is allocated.
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
}

// Plan validates s against this host and resolves it.
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
	}
	switch s.Tier {
	case TierCgroup2:
		if !caps.Cgroup2 {
			return nil, fmt.Errorf("the cgroup2 ownership tier was requested but %s; run as root on a host with a writable cgroup2 mount, or choose --tier subreaper explicitly: %w", caps.Cgroup2Reason, ErrCapability)
		}
		p.Tier = TierCgroup2
	case TierSubreaper:
		p.Tier = TierSubreaper
		p.TierNote = "subreaper chosen explicitly: orphans are adopted and reaped, but a process that leaves the tree is not owned and there is no kernel tree-exit proof"
	default:
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
	return p, nil
}
