package hostfork

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// V1LimitParent is the group under each cgroup v1 hierarchy that holds
// hostfork's per-environment limit groups.
const V1LimitParent = "hostfork"

// PlannedLimit is one requested budget and how the host enforces it.
type PlannedLimit struct {
	Resource string `json:"resource"`
	Value    string `json:"value"`
	// Mechanism is cgroup2 or cgroup1; empty when the host can't enforce
	// it (then the plan is unsupported, unless weaker limits were
	// explicitly accepted and the limit is recorded as not enforced).
	Mechanism string `json:"mechanism,omitempty"`
	Note      string `json:"note,omitempty"`
}

func (h *Host) limitHost(p *Plan) (*limits.Host, error) {
	return limits.Detect(limits.Config{V2Parent: p.CgroupParent, V1Parent: V1LimitParent, EnableV2: p.CgroupParent != ""})
}

// planLimits resolves the requested budget against the host's controllers.
func (h *Host) planLimits(p *Plan) error {
	l := p.Spec.Limits
	if l.Empty() {
		return nil
	}
	lh, err := h.limitHost(p)
	if err != nil {
		return fmt.Errorf("detecting resource controllers: %w", err)
	}
	want := []struct {
		r     limits.Resource
		on    bool
		value string
	}{
		{limits.Memory, l.Memory != 0, fmt.Sprintf("%d bytes", int64(l.Memory))},
		{limits.CPU, l.CPUs != 0, fmt.Sprintf("%g cores", l.CPUs)},
		{limits.Pids, l.Pids != 0, fmt.Sprintf("%d processes", l.Pids)},
	}
	for _, w := range want {
		if !w.on {
			continue
		}
		s := lh.For(w.r)
		pl := PlannedLimit{Resource: string(w.r), Value: w.value, Mechanism: string(s.Mechanism)}
		switch {
		case s.Available() && s.Mechanism == limits.Cgroup1:
			pl.Note = "aggregate over the environment (keeper included) through the cgroup v1 " + string(w.r) + " controller at " + s.Dir + " (this host's controllers are on v1)"
		case s.Available():
			pl.Note = "aggregate over the environment (keeper included) through the cgroup2 controller"
		case l.AllowWeaker:
			pl.Note = "NOT enforced: " + s.Reason + " (accepted with --allow-weaker)"
		default:
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("%s limit: %s; run where the controller is available, or accept an unenforced limit explicitly with --allow-weaker", w.r, s.Reason))
		}
		p.Limits = append(p.Limits, pl)
	}
	return nil
}

// budget is what Create will ask the kernel to enforce.
func (p *Plan) budget() limits.Budget {
	b := limits.Budget{MemoryBytes: int64(p.Spec.Limits.Memory), CPUs: p.Spec.Limits.CPUs, Pids: p.Spec.Limits.Pids}
	for _, pl := range p.Limits {
		if pl.Mechanism != "" {
			continue
		}
		switch limits.Resource(pl.Resource) {
		case limits.Memory:
			b.MemoryBytes = 0
		case limits.CPU:
			b.CPUs = 0
		case limits.Pids:
			b.Pids = 0
		}
	}
	return b
}

// createLimits makes the environment's limit groups (after recording an
// intent for each v1 group) and returns the group record.
func (h *Host) createLimits(ctx context.Context, rec *registry.Env, p *Plan) (*limits.Group, error) {
	lh, err := h.limitHost(p)
	if err != nil {
		return nil, err
	}
	var ids []int64
	err = h.reg.Write(ctx, func(tx *registry.Tx) error {
		for _, d := range lh.V1ParentDirs() {
			id, err := tx.AddIntent(rec.ID, "", "cgroup-v1", filepath.Join(d, rec.ID))
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recording limit groups: %w", err)
	}
	for _, d := range lh.V1ParentDirs() {
		if err := ensureDir(d); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	g, err := lh.Create(rec.ID, rec.CgroupPath, p.budget())
	if err != nil {
		return nil, fmt.Errorf("applying limits: %w", err)
	}
	_ = h.reg.Write(ctx, func(tx *registry.Tx) error {
		for _, id := range ids {
			if err := tx.SettleIntent(id, registry.IntentCreated, "", ""); err != nil {
				return err
			}
		}
		return nil
	})
	return g, nil
}

func limitGroup(e *registry.Env) *limits.Group {
	if len(e.Limits) == 0 {
		return nil
	}
	var g limits.Group
	if json.Unmarshal(e.Limits, &g) != nil {
		return nil
	}
	return &g
}

// oomCount reads the environment's OOM-kill counter; ok is false when the
// kernel's evidence can't be read.
func oomCount(e *registry.Env) (uint64, bool) {
	g := limitGroup(e)
	if g == nil {
		return 0, false
	}
	ev := g.Evidence()
	if ev.Memory.OOMKills == nil {
		return 0, false
	}
	return *ev.Memory.OOMKills, true
}
