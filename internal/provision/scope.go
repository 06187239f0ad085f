package provision

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/systemd"
	"github.com/habemus-papadum/hostfork/spec"
)

// CreateScope makes the environment a transient scope: it starts the
// environment's keeper (its anchor, also without a view), creates the
// scope around it, then moves it into the scope's keeper/ group and makes
// commands/ beside it, so the scope root holds no process.
func CreateScope(ctx context.Context, rec *api.Env, p *spec.Plan, ks *supervise.KeeperSpec) (*supervise.Keeper, error) {
	bus := systemd.DefaultBus()
	c, err := systemd.Connect(ctx, bus, systemd.Options{})
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd on %s: %w", bus, err)
	}
	defer c.Close()
	k, err := supervise.StartKeeper(ks)
	if err != nil {
		return nil, err
	}
	pfd, err := linux.OpenVerified(k.ID)
	if err != nil {
		k.Kill()
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
		left := (rec.ActivatedMono + p.MaxRuntime.D() - linux.MonotonicNow()).Truncate(time.Microsecond)
		if left <= p.Grace.D() {
			k.Kill()
			return nil, fmt.Errorf("the deadline passed while the environment was set up: %w", api.ErrEnvNotActive)
		}
		opts.Deadline = &systemd.Deadline{MaxRuntime: left, Grace: p.Grace.D()}
	}
	rec.Unit = "hostfork-" + rec.ID + ".scope"
	s, err := c.StartScope(ctx, rec.Unit, systemd.Members{PIDFDs: []int{pfd.Fd()}, PIDs: []uint32{uint32(k.ID.PID)}}, opts)
	if err != nil {
		k.Kill()
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
	kg, err := cgroup.Create(filepath.Join(rec.CgroupPath, records.KeeperGroup))
	if err != nil {
		return k, fmt.Errorf("in the delegated scope: %w", err)
	}
	for _, sub := range []string{records.CommandsGroup, records.GuardiansGroup} {
		if _, err := cgroup.Create(filepath.Join(rec.CgroupPath, sub)); err != nil {
			return k, fmt.Errorf("in the delegated scope: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(kg.Path, "cgroup.procs"), []byte(fmt.Sprint(k.ID.PID)), 0); err != nil {
		return k, fmt.Errorf("moving the keeper into the scope's keeper group: %w", err)
	}
	rec.CgroupInode, _ = cgroup.Open(rec.CgroupPath).Inode()
	return k, nil
}

// StopScope asks the manager to stop the environment's scope and records
// the manager's result. Processes are already stopped by the cgroup
// protocol; this ends the keeper and the unit.
func StopScope(ctx context.Context, env *api.Env) error {
	if env.Unit == "" {
		return nil
	}
	c, err := systemd.Connect(ctx, systemd.DefaultBus(), systemd.Options{})
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
