package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/evidence"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/planner"
	"github.com/habemus-papadum/hostfork/internal/provision"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/retention"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/view"
	"github.com/habemus-papadum/hostfork/spec"
)

// creation is one environment being made: its record, its ledger entries
// and what has been made so far (for the rollback).
type creation struct {
	e       *Engine
	p       *spec.Plan
	infos   map[string]*planner.Source
	rec     *api.Env
	intents []*registry.Intent
	treeIn  map[string]*registry.Intent // by tree name
	lg      *limits.Group
	keeper  *supervise.Keeper
	madeCg  bool
	// forked: the trees were taken by a fork (rec.Trees), not allocated.
	forked bool
}

// The child groups of an environment's cgroup: its commands' groups, its
// guardians, and (with a view) its keeper. A stop removes them by name
// (cgroup.Group.Remove), as does a failed creation.
const (
	cgCommands  = records.CommandsGroup
	cgGuardians = records.GuardiansGroup
	cgKeeper    = records.KeeperGroup
)

var envSubgroups = []string{cgCommands, cgGuardians, cgKeeper}

// Create makes the environment p describes: a reservation commit (the
// record and every intent), the OS work (run directory, cgroups, limit
// groups, trees, keeper), and an activation commit (the identities). With
// cs, the environment's first command is reserved, prepared and registered
// in the same two commits (a run: its result and the environment's stop
// are the third). A failure rolls back exactly what was made and records
// the environment failed.
func (e *Engine) Create(ctx context.Context, p *spec.Plan, cs *CommandSpec) (*api.Env, *Running, error) {
	if err := e.checkOpen(); err != nil {
		return nil, nil, err
	}
	if len(p.Unsupported) > 0 {
		return nil, nil, fmt.Errorf("the plan can't run on this host: %s: %w", strings.Join(p.Unsupported, "; "), api.ErrUnsupported)
	}
	// A saved plan is not proof that the host is unchanged: resolve the
	// trees' sources again.
	check := *p
	check.Unsupported, check.Trees, check.Notes = nil, nil, nil
	infos, err := e.plans().PlanView(ctx, &check)
	if err != nil {
		return nil, nil, err
	}
	if len(check.Unsupported) > 0 {
		return nil, nil, fmt.Errorf("the plan no longer holds on this host: %s: %w", strings.Join(check.Unsupported, "; "), api.ErrUnsupported)
	}
	var l *launch
	if cs != nil {
		if l, err = e.newLaunch(ctx, cs); err != nil {
			return nil, nil, err
		}
		defer l.releaseAdmission()
	}
	c, err := e.reserveEnv(ctx, p, infos, l, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := c.build(ctx); err != nil {
		c.abandon(err, l)
		return nil, nil, err
	}
	if l != nil {
		if err := l.resolve(c.rec); err != nil {
			c.abandon(err, l)
			return nil, nil, err
		}
		if err := l.prepare(ctx, c.rec, c.lg); err != nil {
			c.abandon(err, l)
			return nil, nil, err
		}
	}
	if err := c.activate(ctx, l); err != nil {
		c.abandon(fmt.Errorf("recording the environment's resources: %w", err), l)
		return nil, nil, err
	}
	if err := c.commitKeeper(); err != nil {
		c.abandon(err, l)
		return nil, nil, err
	}
	var r *Running
	if l != nil {
		if r, err = l.release(ctx, c.rec); err != nil {
			return c.rec, nil, err
		}
	}
	if !c.rec.AutoStop {
		e.reg.WriteManifest(ctx, c.rec.ID)
	}
	return c.rec, r, nil
}

// Record, TreeIntents, Build and Abandon make a creation a fork's child
// (fork.Child).
func (c *creation) Record() *api.Env                         { return c.rec }
func (c *creation) TreeIntents() map[string]*registry.Intent { return c.treeIn }
func (c *creation) Abandon(cause error)                      { c.abandon(cause, nil) }

// Build builds and activates a fork's child from its taken trees.
func (c *creation) Build(ctx context.Context) error {
	err := c.build(ctx)
	if err == nil {
		err = c.activate(ctx, nil)
	}
	if err == nil {
		err = c.commitKeeper()
	}
	if err != nil {
		c.abandon(err, nil)
		return err
	}
	if !c.rec.AutoStop {
		c.e.reg.WriteManifest(ctx, c.rec.ID)
	}
	return nil
}

// commitKeeper confirms the keeper, once the environment is active.
func (c *creation) commitKeeper() error {
	if c.keeper == nil {
		return nil
	}
	commands, guardians := "", ""
	if c.rec.CgroupPath != "" {
		commands, guardians = filepath.Join(c.rec.CgroupPath, cgCommands), filepath.Join(c.rec.CgroupPath, cgGuardians)
	}
	if err := c.keeper.Commit(commands, guardians); err != nil {
		return fmt.Errorf("confirming the keeper: %w", err)
	}
	holdOwner(c.keeper)
	return nil
}

// reserveEnv records the environment (state creating) and an intent for
// every resource its creation will make, with the first command's
// reservation when there is one: one commit. origin names a fork's parent.
func (e *Engine) reserveEnv(ctx context.Context, p *spec.Plan, infos map[string]*planner.Source, l *launch, origin *api.ForkOrigin) (*creation, error) {
	boot, err := linux.BootID()
	if err != nil {
		return nil, err
	}
	self, _ := linux.IdentityOf(os.Getpid())
	id := newID()
	now := time.Now().UTC()
	labels := p.Spec.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	rec := &api.Env{
		ID: id, State: api.EnvCreating, CreatedAt: now, BootID: boot,
		Purpose: p.Spec.Purpose, Labels: labels, Tier: p.Tier,
		RunDir: filepath.Join(e.root, "runs", id), OwnerExit: p.OwnerExit, Owner: records.ToAPI(self),
		UntilStopped: p.UntilStopped, AutoStop: l != nil && l.cs.AutoStop,
		TTL: p.MaxRuntime, Grace: p.Grace, IdleTimeout: p.Spec.Lifetime.IdleTimeout,
		Trees: []api.Tree{}, CleanupErrors: []string{}, Commands: nil, Fork: origin,
	}
	if b, err := json.Marshal(p.Spec); err == nil {
		rec.Spec = b
	}
	if p.View != nil {
		if b, err := json.Marshal(p.View); err == nil {
			rec.View = b
		}
	}
	if p.Tier == api.TierCgroup2 {
		rec.CgroupPath = filepath.Join(p.CgroupParent, id)
	}
	c := &creation{e: e, p: p, infos: infos, rec: rec, treeIn: map[string]*registry.Intent{}}
	add := func(kind, target string) *registry.Intent {
		in := &registry.Intent{EnvID: id, Kind: kind, Target: target}
		c.intents = append(c.intents, in)
		return in
	}
	add(registry.KindDir, rec.RunDir)
	if rec.CgroupPath != "" {
		add(registry.KindCgroup, rec.CgroupPath)
	}
	if p.Tier == api.TierSystemdScope {
		add(registry.KindScope, "systemd:hostfork-"+id+".scope")
	}
	if !p.Spec.Limits.Empty() {
		lh, err := e.plans().LimitHost(p)
		if err != nil {
			return nil, err
		}
		for _, d := range lh.V1ParentDirs() {
			add(registry.KindCgroupV1, filepath.Join(d, id))
		}
	}
	for _, pt := range p.Trees {
		c.treeIn[pt.Name] = add(registry.KindTree, provision.TreeDest(e.root, id, pt.Name, pt.Kind, infos[pt.Name]))
	}
	var b registry.Batch
	b.Now = now
	b.InsertEnv(rec)
	for _, in := range c.intents {
		b.AddIntent(in)
	}
	if l != nil {
		l.reserve(&b, rec, lhOf(e, p))
	}
	if err := e.reg.Commit(ctx, &b); err != nil {
		return nil, fmt.Errorf("recording the new environment: %w", err)
	}
	if l != nil {
		l.reserved()
	}
	fault.Point(fault.CreateRecorded)
	return c, nil
}

// lhOf is the limit host of a plan with limits (nil otherwise).
func lhOf(e *Engine, p *spec.Plan) *limits.Host {
	if p.Spec.Limits.Empty() {
		return nil
	}
	lh, _ := e.plans().LimitHost(p)
	return lh
}

// build makes the environment's resources, in the order of the ledger.
func (c *creation) build(ctx context.Context) error {
	e, rec, p := c.e, c.rec, c.p
	// Exclusive creation: an existing directory is never adopted.
	if err := os.Mkdir(rec.RunDir, 0o700); err != nil {
		return fmt.Errorf("creating run directory: %w", err)
	}
	if err := os.Mkdir(filepath.Join(rec.RunDir, "commands"), 0o700); err != nil {
		return fmt.Errorf("creating run directory: %w", err)
	}
	if rec.CgroupPath != "" {
		g, err := cgroup.Create(rec.CgroupPath)
		if err != nil {
			return fmt.Errorf("creating the environment's cgroup: %w", err)
		}
		c.madeCg = true
		subs := envSubgroups[:2:2]
		if p.View != nil {
			subs = envSubgroups
		}
		for _, s := range subs {
			if _, err := cgroup.Create(filepath.Join(rec.CgroupPath, s)); err != nil {
				return fmt.Errorf("creating the environment's cgroup: %w", err)
			}
		}
		rec.CgroupInode, _ = g.Inode()
		fault.Point(fault.CreateCgroup)
	}
	scope := p.Tier == api.TierSystemdScope
	if !scope {
		if err := c.makeLimits(); err != nil {
			return err
		}
	}
	var ops []supervise.KeeperOp
	var treeFiles []*os.File
	if p.View != nil {
		trees := rec.Trees
		if !c.forked {
			var err error
			trees, err = provision.AllocateTrees(ctx, rec, p, c.infos, c.treeIn)
			rec.Trees = trees
			if err != nil {
				return err
			}
		}
		vops, files, err := provision.ViewOps(ctx, p, trees)
		if err != nil {
			return err
		}
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
		treeFiles = files
		if ops, err = view.Compile(vops); err != nil {
			return err
		}
	}
	// Activation: the deadline runs from here, before the view is built
	// (setup after activation counts against it; DESIGN.md, Deadline).
	rec.ActivatedMono = linux.MonotonicNow()
	act := time.Now().UTC()
	rec.ActivatedAt = &act
	if p.View != nil || scope {
		klog, err := os.OpenFile(filepath.Join(rec.RunDir, "keeper.log"), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("creating keeper log: %w", err)
		}
		defer klog.Close()
		ks := &supervise.KeeperSpec{Exe: e.opts.Exe, Log: klog, EnvID: rec.ID, OwnerExit: p.OwnerExit,
			Slave: p.Propagation == "slave", Grace: p.Grace.D(), Ops: ops, Files: treeFiles}
		if p.MaxRuntime > 0 {
			ks.DeadlineMono = rec.ActivatedMono + p.MaxRuntime.D()
			ks.RunDir = rec.RunDir // a moved deadline (Extend) is there
		}
		if m, err := cgroup.FindMount(); err == nil {
			ks.CgroupMount = m.Path
		}
		if scope {
			k, err := provision.CreateScope(ctx, rec, p, ks)
			c.keeper = k
			if k != nil {
				rec.Keeper = records.ToAPI(k.ID)
			}
			if err != nil {
				return err
			}
			if err := c.makeLimits(); err != nil {
				return err
			}
		} else {
			if rec.CgroupPath != "" {
				ks.Cgroup = filepath.Join(rec.CgroupPath, cgKeeper)
				ks.CommandsCgroup = filepath.Join(rec.CgroupPath, cgCommands)
				ks.GuardiansCgroup = filepath.Join(rec.CgroupPath, cgGuardians)
			}
			k, err := supervise.StartKeeper(ks)
			if err != nil {
				return err
			}
			c.keeper = k
			rec.Keeper = records.ToAPI(k.ID)
		}
		if c.lg != nil {
			// The keeper counts against the budget (v1: join by PID).
			if err := c.lg.Join(c.keeper.ID.PID); err != nil {
				return err
			}
		}
		fault.Point(fault.KeeperStarted)
	}
	if p.MaxRuntime > 0 {
		rec.DeadlineMono = rec.ActivatedMono + p.MaxRuntime.D()
		at := act.Add(p.MaxRuntime.D())
		rec.DeadlineAt = &at
	}
	return nil
}

func (c *creation) makeLimits() error {
	p, rec := c.p, c.rec
	if p.Spec.Limits.Empty() {
		return nil
	}
	lh, err := c.e.plans().LimitHost(p)
	if err != nil {
		return err
	}
	for _, d := range lh.V1ParentDirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	g, err := lh.Create(rec.ID, rec.CgroupPath, planner.Budget(p))
	if err != nil {
		return fmt.Errorf("applying limits: %w", err)
	}
	c.lg = g
	if b, err := json.Marshal(g); err == nil {
		rec.Limits = b
	}
	return nil
}

// activate records the environment active with every identity, and the
// first command's registration: one commit.
func (c *creation) activate(ctx context.Context, l *launch) error {
	old := *c.rec
	old.State = api.EnvCreating
	old.Rev = 1
	next := *c.rec
	next.State = api.EnvActive
	var b registry.Batch
	b.UpdateEnv(&old, &next)
	override := map[int64]registry.Fact{}
	for _, in := range c.intents {
		switch in.Kind {
		case registry.KindScope:
			b, _ := json.Marshal(map[string]string{"unit": next.Unit, "cgroup": next.CgroupPath, "membership": next.ScopeMembership})
			override[in.ID] = registry.Fact{Exists: true, Identity: string(b)}
		case registry.KindTree:
			for _, t := range next.Trees {
				if c.treeIn[t.Name] == in {
					override[in.ID] = registry.Fact{Exists: true, Identity: string(t.Storage)}
				}
			}
		}
	}
	records.SettleAll(&b, c.intents, override)
	if l != nil {
		l.register(&b, &next)
	}
	if err := c.e.reg.Commit(ctx, &b); err != nil {
		return err
	}
	*c.rec = next
	return nil
}

// abandon undoes a failed creation: it removes what was made (only the
// exact recorded targets), records the outcome, and aborts the first
// command's launch. Errors are recorded, never hidden.
func (c *creation) abandon(cause error, l *launch) {
	e, rec := c.e, c.rec
	ctx := context.Background()
	if l != nil {
		l.abortGuardian()
	}
	var cleanup []string
	if c.keeper != nil {
		c.keeper.Kill()
	}
	if rec.Unit != "" {
		if err := provision.StopScope(ctx, rec); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	if rec.CgroupPath != "" && c.madeCg {
		g := cgroup.Open(rec.CgroupPath)
		_ = g.Kill()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = g.WaitEmpty(wctx)
		cancel()
		if err := g.Remove(envSubgroups...); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	if c.lg != nil {
		if err := c.lg.Remove(ctx); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	cleanup = append(cleanup, provision.RemoveTrees(ctx, e.root, rec.ID, rec.Trees)...)
	// Trees whose identity was never recorded (made, but not yet in the
	// record): exact allocation destinations are removed; anything else
	// stays pending for a person to check.
	treeFacts := map[int64]registry.Fact{}
	if ins, err := e.reg.Intents(ctx, registry.IntentFilter{EnvID: rec.ID, Kind: registry.KindTree, Open: true}); err == nil {
		for _, in := range ins {
			if in.State == registry.IntentPending {
				if f, ok := retention.RemoveUnrecordedTree(ctx, e.root, in, &cleanup); ok {
					treeFacts[in.ID] = f
				}
			}
		}
	}
	// The run directory stays: its logs (keeper.log) are the evidence of
	// the failure; retention removes it like any other evidence.
	for try := 0; try < 5; try++ {
		cur, err := e.reg.Env(ctx, rec.ID)
		if err != nil {
			return
		}
		next := *cur
		next.State = api.EnvFailed
		next.Error = cause.Error()
		next.Trees, next.Keeper, next.Limits = rec.Trees, rec.Keeper, rec.Limits
		next.Unit, next.ScopeMembership, next.ManagerResult = rec.Unit, rec.ScopeMembership, rec.ManagerResult
		next.CgroupPath = rec.CgroupPath
		next.CleanupErrors = append(append([]string{}, cur.CleanupErrors...), cleanup...)
		now := time.Now().UTC()
		next.StoppedAt = &now
		var b registry.Batch
		b.UpdateEnv(cur, &next)
		ins, _ := e.reg.Intents(ctx, registry.IntentFilter{EnvID: rec.ID, Open: true})
		override := map[int64]registry.Fact{}
		for i := range ins {
			if ins[i].Kind == registry.KindScope {
				override[ins[i].ID] = registry.Fact{Exists: false}
			}
			if f, ok := treeFacts[ins[i].ID]; ok {
				override[ins[i].ID] = f
			}
			if ins[i].CommandID != "" && l != nil && ins[i].CommandID == l.rec.ID && ins[i].Kind == registry.KindDir {
				// The command's directory stays as evidence.
				override[ins[i].ID] = registry.Fact{Exists: true, Identity: records.PathIdentity(ins[i].Target)}
			}
		}
		records.SettleAll(&b, records.Ptrs(ins), override)
		if l != nil {
			l.failInBatch(ctx, &b, cause)
		}
		err = e.reg.Commit(ctx, &b)
		if err == nil || !errors.Is(err, registry.ErrConflict) {
			break
		}
	}
	e.reg.WriteManifest(ctx, rec.ID)
}

// abandonInterrupted finishes a creation whose creator died: whatever the
// ledger shows was made is killed and removed (exact targets only), and the
// environment is recorded as failed.
func (e *Engine) abandonInterrupted(ctx context.Context, env *api.Env) {
	ins, _ := e.reg.Intents(ctx, registry.IntentFilter{EnvID: env.ID, Open: true})
	for _, in := range ins {
		if in.Kind == registry.KindTree && in.State == registry.IntentCreated {
			if !slices.ContainsFunc(env.Trees, func(t api.Tree) bool { return t.HostPath == in.Target || safefs.Within(in.Target, t.HostPath) }) {
				// The identity is only in the intent: rebuild the record.
				var st storage.Tree
				if json.Unmarshal([]byte(in.Identity), &st) == nil {
					raw, _ := json.Marshal(st)
					env.Trees = append(env.Trees, api.Tree{Name: filepath.Base(in.Target), Kind: string(st.Kind), HostPath: st.Path, Storage: raw, State: api.TreeAllocated})
				}
			}
		}
	}
	c := &creation{e: e, rec: env}
	if env.CgroupPath != "" {
		c.madeCg = true
	}
	c.lg = evidence.LimitGroup(env)
	if env.Keeper != nil {
		// Not our child: end it through its verified identity.
		supervise.StopKeeper(ctx, records.ToLinux(env.Keeper))
	}
	var l *launch
	cmds, _ := e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
	why := "creation interrupted: its creator exited before the environment was active"
	for _, cmd := range cmds {
		if !cmd.Final() {
			if n, _ := e.settleCommand(ctx, env, cmd); n != nil && !n.Final() {
				_, _ = e.stopCommand(ctx, env, n, StopOptions{Reason: api.ReasonOwnerExit})
			}
		}
	}
	c.abandon(errors.New(why), l)
}
