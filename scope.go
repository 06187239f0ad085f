package hostfork

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/systemd"
	"github.com/habemus-papadum/hostfork/internal/view"
)

// TierSystemdScope: the environment is a transient systemd scope with
// Delegate=yes; the manager enforces its deadline (DESIGN.md, "Ownership
// tiers").
const TierSystemdScope = "systemd-scope"

// systemdBus is the manager hostfork talks to: the system manager for
// root, the user's manager otherwise.
func systemdBus() systemd.Bus {
	if os.Geteuid() == 0 {
		return systemd.SystemBus
	}
	return systemd.UserBus
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
	c, err := systemd.Connect(ctx, systemdBus(), systemd.Options{CallTimeout: 3 * time.Second})
	if err != nil {
		return "", false, "no systemd manager answers on " + systemdBus().String() + ": " + err.Error()
	}
	defer c.Close()
	pidfds, version, err = c.SupportsPIDFDs(ctx)
	if err != nil {
		return "", false, "the systemd manager did not say its version: " + err.Error()
	}
	return version, pidfds, ""
}

// planScope fills the plan for the systemd-scope tier.
func (h *Host) planScope(ctx context.Context, p *Plan) error {
	version, pidfds, reason := probeSystemd(ctx)
	if reason != "" {
		return fmt.Errorf("the systemd-scope ownership tier was requested but %s; use --tier cgroup2 or subreaper: %w", reason, ErrCapability)
	}
	cm, err := cgroup.FindMount()
	if err != nil || cm.Hybrid {
		return fmt.Errorf("the systemd-scope tier needs a unified cgroup2 hierarchy managed by systemd: %w", ErrCapability)
	}
	p.Tier = TierSystemdScope
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

// createScope makes the environment a transient scope: it starts the
// environment's keeper (its anchor, also without a view), creates the
// scope around it, then moves it into the scope's keeper/ group and makes
// commands/ beside it, so the scope root holds no process.
func (h *Host) createScope(ctx context.Context, rec *registry.Env, p *Plan, ops []view.Op, log *os.File) (*view.Keeper, error) {
	bus := systemdBus()
	c, err := systemd.Connect(ctx, bus, systemd.Options{})
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd on %s: %w", bus, err)
	}
	defer c.Close()
	kc := &view.KeeperConfig{EnvID: rec.ID, Ops: ops, OwnerExit: p.OwnerExit, Grace: p.Grace}
	if p.MaxRuntime > 0 {
		kc.DeadlineMono = rec.ActivatedMono + p.MaxRuntime
	}
	k, err := view.StartKeeper(h.opts.Exe, "", log, kc)
	if err != nil {
		return nil, err
	}
	pfd, err := linux.OpenVerified(k.ID)
	if err != nil {
		k.Detach()
		return nil, err
	}
	defer pfd.Close()
	opts := systemd.ScopeOptions{
		Description: "hostfork environment " + rec.ID,
		// The keeper is our unreaped child: its PID can't be reused before
		// we reap it, so a numeric PID names exactly this process.
		AllowPIDs: true,
	}
	if rec.Purpose != "" {
		opts.Description += ": " + rec.Purpose
	}
	if p.MaxRuntime > 0 {
		// The remaining budget: activation was before the scope existed.
		// The manager keeps microseconds.
		left := (rec.ActivatedMono + p.MaxRuntime - linux.MonotonicNow()).Truncate(time.Microsecond)
		if left <= p.Grace {
			k.Detach()
			return nil, fmt.Errorf("the deadline passed while the environment was set up: %w", ErrEnvNotActive)
		}
		opts.Deadline = &systemd.Deadline{MaxRuntime: left, Grace: p.Grace}
	}
	rec.Unit = "hostfork-" + rec.ID + ".scope"
	s, err := c.StartScope(ctx, rec.Unit, systemd.Members{PIDFDs: []int{pfd.Fd()}, PIDs: []uint32{uint32(k.ID.PID)}}, opts)
	if err != nil {
		k.Detach()
		return nil, fmt.Errorf("creating the scope: %w", err)
	}
	rec.ScopeMembership = s.Membership
	cm, err := cgroup.FindMount()
	if err != nil {
		return k, err
	}
	root, err := systemd.ManagerRoot(1)
	if err != nil {
		return k, err
	}
	rec.CgroupPath = systemd.CgroupPath(cm.Path, root, s.State.ControlGroup)
	kg, err := cgroup.Create(filepath.Join(rec.CgroupPath, "keeper"))
	if err != nil {
		return k, fmt.Errorf("in the delegated scope: %w", err)
	}
	if _, err := cgroup.Create(filepath.Join(rec.CgroupPath, "commands")); err != nil {
		return k, fmt.Errorf("in the delegated scope: %w", err)
	}
	if err := os.WriteFile(filepath.Join(kg.Path, "cgroup.procs"), []byte(fmt.Sprint(k.ID.PID)), 0); err != nil {
		return k, fmt.Errorf("moving the keeper into the scope's keeper group: %w", err)
	}
	rec.CgroupInode, _ = cgroup.Open(rec.CgroupPath).Inode()
	return k, nil
}

// stopScope asks the manager to stop the environment's scope and records
// the manager's result. Processes are already stopped by the cgroup
// protocol; this ends the keeper and the unit.
func stopScope(ctx context.Context, env *registry.Env) error {
	if env.Unit == "" {
		return nil
	}
	c, err := systemd.Connect(ctx, systemdBus(), systemd.Options{})
	if err != nil {
		return fmt.Errorf("connecting to systemd to stop %s: %w", env.Unit, err)
	}
	defer c.Close()
	st, err := c.StopUnit(ctx, env.Unit)
	if st != nil {
		env.ManagerResult = st.Result
		if env.ManagerResult == "" && st.Gone() {
			env.ManagerResult = "unknown (the unit was already collected)"
		}
	}
	return err
}
