package planner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/plan"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/store"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/systemd"
	"github.com/habemus-papadum/hostfork/internal/view"
	"github.com/habemus-papadum/hostfork/spec"
)

// V1LimitParent is the group under each cgroup v1 hierarchy that holds
// hostfork's per-environment limit groups when there is no cgroup2
// parent to mirror (see v1LimitParent).
const V1LimitParent = "hostfork"

// v1LimitParent is where, under each cgroup v1 hierarchy, the limit
// groups of environments under the cgroup2 parent v2 are made: v2's path
// below the cgroup2 mount (root's default parent <mount>/hostfork gives
// "hostfork"), so that a store given a cgroup parent of its own
// (HOSTFORK_CGROUP_PARENT) gets v1 groups of its own too; V1LimitParent
// when v2 is empty or not below the mount.
func v1LimitParent(mount, v2 string) string {
	if rel, ok := cgroup.Below(mount, v2); ok {
		return rel
	}
	return V1LimitParent
}

// Planner plans environments for one store.
type Planner struct {
	root string
	reg  *records.Records
	caps func() api.Capabilities // the host's ownership tiers, probed once
}

// New is the planner of the store at root; caps reports the host's
// ownership tiers.
func New(root string, reg *records.Records, caps func() api.Capabilities) *Planner {
	return &Planner{root: root, reg: reg, caps: caps}
}

// Plan validates s against this host and resolves it. Errors are for
// malformed requests; what the host can't do is listed in Unsupported.
func (e *Planner) Plan(ctx context.Context, s spec.Environment) (*spec.Plan, error) {
	if s.Profile != "" {
		// The store's profiles (config.yaml), under the spec's own.
		if _, own := s.Profiles[s.Profile]; !own {
			ps, err := store.Profiles(e.root)
			if err != nil {
				return nil, err
			}
			if p, ok := ps[s.Profile]; ok {
				s.Profiles = maps.Clone(s.Profiles)
				if s.Profiles == nil {
					s.Profiles = map[string]spec.Profile{}
				}
				s.Profiles[s.Profile] = p
			}
		}
		// $HOME in a profile is the spec's own HOME, else this process's.
		home := s.Env["HOME"]
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		if err := s.ApplyProfile(home); err != nil {
			return nil, err
		}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	caps := e.caps()
	p := &spec.Plan{
		Spec:         s,
		MaxRuntime:   s.Lifetime.MaxRuntime,
		Grace:        s.Lifetime.Grace,
		OwnerExit:    s.Lifetime.OwnerExit,
		UntilStopped: s.Lifetime.UntilStopped,
	}
	switch api.Tier(s.Tier) {
	case api.TierSystemdScope:
		if err := e.planScope(ctx, p); err != nil {
			return nil, err
		}
	case api.TierCgroup2:
		if !caps.Cgroup2 {
			return nil, fmt.Errorf("the cgroup2 ownership tier was requested but %s; run as root on a host with a writable cgroup2 mount, or choose --tier subreaper explicitly: %w", caps.Cgroup2Reason, api.ErrUnsupported)
		}
		p.Tier = api.TierCgroup2
	case api.TierSubreaper:
		p.Tier = api.TierSubreaper
		p.TierNote = "subreaper chosen explicitly: orphans are adopted and reaped, but a process that leaves the tree is not owned and there is no kernel tree-exit proof"
	default:
		if systemdBooted() && e.planScope(ctx, p) == nil {
			break // under systemd, environments are its delegated scopes
		}
		if caps.Cgroup2 {
			p.Tier = api.TierCgroup2
		} else {
			p.Tier = api.TierSubreaper
			p.TierNote = "weaker subreaper tier (" + caps.Cgroup2Reason + "): orphans are adopted and reaped, but there is no kernel tree-exit proof"
		}
	}
	if p.Tier == api.TierCgroup2 {
		p.CgroupParent = caps.CgroupParent
	}
	if p.MaxRuntime > 0 && p.DeadlineEnforcer == "" {
		p.DeadlineEnforcer = "guardian timers (and the keeper's, with a view): independent of the registry, storage and caller; 'hostfork reap' is the backstop"
	}
	if _, err := e.PlanView(ctx, p); err != nil {
		return nil, err
	}
	if err := e.planLimits(p); err != nil {
		return nil, err
	}
	return p, nil
}

// Source is what inspecting a tree's source found.
type Source struct {
	Path   string
	Kind   string
	FSType string
	Dev    uint64
	Ino    uint64
	FSID   uint64
}

// PlanView plans the view and its trees; it returns what each tree's
// source is (Create inspects them again).
func (e *Planner) PlanView(ctx context.Context, p *spec.Plan) (map[string]*Source, error) {
	s := &p.Spec
	infos := map[string]*Source{}
	if s.View.Empty() {
		return infos, nil
	}
	planViewTier(p)
	mounts, err := view.ReadMountinfo()
	if err != nil {
		return nil, fmt.Errorf("reading the host's mounts: %w", err)
	}
	facts := plan.Facts{
		Resolve:   func(p string) (plan.Resolved, error) { return resolveTarget(p, s.View.AllowUntrustedTargets) },
		Protected: []string{e.root},
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
		return nil, err
	}
	// replace and scratch mount a directory: refuse a file target now,
	// before anything is allocated.
	for _, r := range res.Rules {
		if (r.Kind == plan.Replace || r.Kind == plan.Scratch) && !r.Mkdir {
			if st, err := os.Stat(r.Target); err == nil && !st.IsDir() {
				return nil, fmt.Errorf("view %s: %s is a file; %s takes a directory: %w", r.Kind, r.Target, r.Kind, api.ErrInvalid)
			}
		}
	}
	p.View = res
	// The view is a recursive slave of the host: every shared host mount
	// keeps receiving the host's mounts and unmounts (as Docker's rslave),
	// private ones stay private, and nothing propagates back.
	p.Propagation = "slave"
	if !anyShared(mounts) {
		p.Notes = append(p.Notes, "the host's mounts are all private here, so the view can't follow them: a filesystem the host mounts or unmounts later is not seen by the view, and one the view still covers stays busy on the host until the environment stops ('mount --make-rshared /' changes that; see 'hostfork doctor')")
	}
	names := slices.Sorted(maps.Keys(s.Trees))
	targetOf := map[string]string{}
	for _, r := range res.Rules {
		if r.Tree != "" {
			targetOf[r.Tree] = r.Target
		}
	}
	for _, n := range names {
		t := s.Trees[n]
		pt := spec.PlannedTree{Name: n, Kind: t.Kind, Baseline: t.Baseline, Source: t.Source, Target: targetOf[n]}
		info, err := e.planTree(ctx, p, &pt)
		if err != nil {
			return nil, err
		}
		infos[n] = info
		p.Trees = append(p.Trees, pt)
	}
	return infos, nil
}

// planViewTier says how the view is made (decision 125): as root, a
// mount namespace; without root, a user namespace that maps the caller
// (and its subordinate ids) with a mount namespace inside it, which the
// host's settings may forbid and in which an overlay needs Linux 5.11.
func planViewTier(p *spec.Plan) {
	if !supervise.RootlessView() {
		p.ViewTier = "root"
		return
	}
	p.ViewTier = "user-namespace"
	p.ViewNote = "rootless view through a user namespace (" + supervise.PlanIDMaps().Describe() + "); weaker than root's: files of other users and root show as nobody/nogroup inside and can't be changed, setuid and setgid programs gain no privilege, and trees are only what this user may read and write"
	if why := linux.UsernsBlockedReason(); why != "" {
		p.Unsupported = append(p.Unsupported, "a view without root needs a user namespace, but "+why)
	}
	for _, t := range p.Spec.Trees {
		if t.Kind == spec.KindOverlay && !linux.KernelAtLeast(5, 11) {
			p.Unsupported = append(p.Unsupported, "an overlay tree without root is mounted in a user namespace, which needs Linux 5.11 or later; choose kind copy (or btrfs), or run as root")
			break
		}
	}
}

// resolveTarget resolves a view target on the host by descriptors
// (safefs.ResolveTarget): symbolic links only where no other user can
// have planted them, and a target another user could redirect refused
// unless the operator allowed it. The keeper opens the result again inside
// the view with RESOLVE_NO_SYMLINKS, so nothing may change in between
// (DESIGN.md, "Trust model": both sides of every mount).
func resolveTarget(p string, allowUntrusted bool) (plan.Resolved, error) {
	t, err := safefs.ResolveTarget(p, os.Geteuid())
	if err != nil {
		return plan.Resolved{}, fmt.Errorf("view target %s: %w (%w)", p, err, api.ErrInvalid)
	}
	r := plan.Resolved{Path: t.Path, Exists: t.Exists}
	if t.Untrusted != nil {
		if !allowUntrusted {
			return r, fmt.Errorf("view target %s: another user could choose what it names: %w; choose a target whose directories only you and root can write, or accept this one with --allow-untrusted-targets (spec: view.allow_untrusted_targets) (%w)", p, t.Untrusted, api.ErrInvalid)
		}
		r.Note = "untrusted target, allowed: " + t.Untrusted.Error() + "; mounted without following any symbolic link"
	}
	return r, nil
}

// anyShared reports whether any of the host's mounts has shared
// propagation.
func anyShared(mounts []view.MountEntry) bool {
	return slices.ContainsFunc(mounts, func(m view.MountEntry) bool { return m.Shared })
}

// planTree checks one tree against the host and the registered baselines.
func (e *Planner) planTree(ctx context.Context, p *spec.Plan, t *spec.PlannedTree) (*Source, error) {
	src := t.Source
	if t.Baseline != "" {
		b, err := e.reg.Baseline(ctx, t.Baseline)
		if err != nil {
			if errors.Is(err, registry.ErrNotFound) {
				return nil, fmt.Errorf("tree %s: no baseline named %q (register it with 'hostfork baseline add %s PATH'): %w", t.Name, t.Baseline, t.Baseline, api.ErrInvalid)
			}
			return nil, err
		}
		src = b.Path
		t.Source = b.Path
	}
	info, err := inspectSource(src)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", t.Name, err)
	}
	if t.Baseline != "" {
		b, _ := e.reg.Baseline(ctx, t.Baseline)
		if b != nil && (b.Device != info.Dev || b.Inode != info.Ino) {
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("tree %s: baseline %s at %s is no longer the directory registered (device/inode changed); re-register it", t.Name, t.Baseline, src))
		}
	}
	switch t.Kind {
	case spec.KindBtrfs:
		t.Consistency = "point-in-time writable snapshot of the subvolume; independent of the source after creation"
		if !linux.Filesystems()["btrfs"] {
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("tree %s: the kernel has no btrfs support (load the btrfs module), and kind btrfs never falls back to another mechanism", t.Name))
		} else if info.Kind != BaselineSubvolume {
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("tree %s: kind btrfs needs a btrfs subvolume, but %s is a directory on %s; prepare a subvolume and register it ('hostfork baseline add'), or choose kind overlay or copy explicitly", t.Name, src, info.FSType))
		}
	case spec.KindOverlay:
		t.Consistency = "live overlay over the source: the source must stay unchanged while the tree is in use (operator-declared stable); reopening needs the source"
		if !linux.Filesystems()["overlay"] {
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("tree %s: the kernel has no overlay filesystem (modprobe overlay), and kind overlay never falls back", t.Name))
		}
	case spec.KindCopy:
		t.Consistency = "independent copy made file by file at creation: not atomic across the tree; reflinked where the filesystem allows"
	case spec.KindWorktree:
		ref := p.Spec.Trees[t.Name].Ref
		commit, err := storage.GitRepository(ctx, src, ref)
		if err != nil {
			return nil, fmt.Errorf("tree %s: %w: %w", t.Name, err, api.ErrInvalid)
		}
		ref = cmp.Or(ref, "HEAD")
		t.Ref, t.Commit = ref, commit
		t.Consistency = "git worktree at " + ref + " (" + commit + ") on a new branch hostfork/ENV/" + t.Name + "; the repository's .git is written only by git's worktree and branch commands; stop keeps it, gc removes it (not when dirty) and keeps the branch"
	}
	return info, nil
}

// LimitHost detects the resource controllers a plan's limits use.
func (e *Planner) LimitHost(p *spec.Plan) (*limits.Host, error) {
	v1 := v1LimitParent(e.caps().CgroupMount, p.CgroupParent)
	return limits.Detect(limits.Config{V2Parent: p.CgroupParent, V1Parent: v1, EnableV2: p.CgroupParent != ""})
}

// planLimits resolves the requested budget against the host's controllers.
func (e *Planner) planLimits(p *spec.Plan) error {
	l := p.Spec.Limits
	if l.Empty() {
		return nil
	}
	if cores := linux.AllowedCPUs(); l.CPUs > float64(cores) {
		return fmt.Errorf("cpus %g is more than this host's %d cores; give at most %d: %w", l.CPUs, cores, cores, api.ErrInvalid)
	}
	lh, err := e.LimitHost(p)
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
		pl := spec.PlannedLimit{Resource: string(w.r), Value: w.value, Mechanism: string(s.Mechanism)}
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

// Budget is what Create will ask the kernel to enforce.
func Budget(p *spec.Plan) limits.Budget {
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

// planScope fills the plan for the systemd-scope tier.
func (e *Planner) planScope(ctx context.Context, p *spec.Plan) error {
	version, pidfds, reason := probeSystemd(ctx)
	if reason != "" {
		return fmt.Errorf("the systemd-scope ownership tier was requested but %s; use --tier cgroup2 or subreaper: %w", reason, api.ErrUnsupported)
	}
	cm, err := cgroup.FindMount()
	if err != nil || cm.Hybrid {
		return fmt.Errorf("the systemd-scope tier needs a unified cgroup2 hierarchy managed by systemd: %w", api.ErrUnsupported)
	}
	p.Tier = api.TierSystemdScope
	p.ScopeManager = "systemd " + version
	if pidfds {
		p.TierNote = "transient scope with Delegate=yes, its first process handed over as a PIDFD; the manager enforces the deadline (SIGTERM at max_runtime-grace, SIGKILL at max_runtime)"
	} else {
		p.TierNote = fmt.Sprintf("transient scope with Delegate=yes; systemd %s takes no PIDFDs at scope creation (needs %d), so its first process, hostfork's own unreaped keeper child whose PID can't be reused before it is reaped, is handed over by PID; the manager enforces the deadline", version, systemd.PIDFDsSince)
	}
	if p.MaxRuntime > 0 {
		p.DeadlineEnforcer = "the systemd manager (RuntimeMaxUSec = max_runtime - grace, TimeoutStopUSec = grace), with guardian timers too; 'hostfork reap' is the backstop"
	}
	return nil
}

// systemdBooted reports whether this host (this PID namespace) runs
// systemd as its init.
func systemdBooted() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}

// probeSystemd checks that a manager answers, and what it can do.
func probeSystemd(ctx context.Context) (version string, pidfds bool, reason string) {
	if !systemdBooted() {
		return "", false, "systemd is not this host's init (/run/systemd/system is missing)"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := systemd.Connect(ctx, systemd.DefaultBus(), systemd.Options{CallTimeout: 3 * time.Second})
	if err != nil {
		return "", false, "no systemd manager answers on " + systemd.DefaultBus().String() + ": " + err.Error()
	}
	defer c.Close()
	pidfds, version, err = c.SupportsPIDFDs(ctx)
	if err != nil {
		return "", false, "the systemd manager did not say its version: " + err.Error()
	}
	return version, pidfds, ""
}
