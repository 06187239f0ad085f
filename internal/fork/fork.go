// Package fork makes new environments whose trees start as a parent's
// trees at one instant (decision 112): it freezes the parent's commands
// for one tree's taking, takes the trees (provision.ForkTrees), and has
// the engine build each child as it builds a created environment. The
// engine reserves and builds the children; what the fork needs of it
// comes through the small Engine interface.
//
// Only the engine imports it.
package fork

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/planner"
	"github.com/habemus-papadum/hostfork/internal/provision"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/spec"
)

// MaxCount is the most environments one fork makes (decision 112).
const MaxCount = 64

// forkBuilders is how many children a fork builds at once.
const forkBuilders = 4

// forkFreezeWait bounds waiting for the parent's commands to report frozen.
const forkFreezeWait = 5 * time.Second

// Options asks for a fork: Count children (1..MaxCount), each
// with the parent's labels plus Labels, and TTL as its time limit when
// set (the parent's otherwise), and OwnerExit as its owner-exit policy
// when set (the parent's otherwise).
type Options struct {
	Count     int
	Labels    map[string]string
	TTL       time.Duration
	OwnerExit string
}

// Engine is what a fork needs of the engine: the store's planning, and
// reserving a child (its record and intents, one commit) that it then
// builds like a created environment.
type Engine interface {
	Plan(ctx context.Context, s spec.Environment) (*spec.Plan, error)
	PlanView(ctx context.Context, p *spec.Plan) (map[string]*planner.Source, error)
	Reserve(ctx context.Context, p *spec.Plan, infos map[string]*planner.Source, origin *api.ForkOrigin) (Child, error)
}

// Child is one reserved child environment.
type Child interface {
	// Record is the child's record; the fork sets its Trees and Fork.
	Record() *api.Env
	// TreeIntents are the intents of the child's trees, by tree name.
	TreeIntents() map[string]*registry.Intent
	// Build builds and activates the child from its taken trees; a
	// child that fails is abandoned.
	Build(ctx context.Context) error
	// Abandon undoes the reserved child, recording cause.
	Abandon(cause error)
}

// Fork makes o.Count new environments whose trees start as the parent's
// trees at one instant (decision 112). The children are reserved first
// (each its record and intents), with an intent for the freeze; then the
// parent's commands group is frozen (cgroup.freeze; its guardians and
// keeper run on), the first child's trees are taken (storage.Fork), the
// group is thawed and the freeze intent settled; the other children's
// trees are taken from the first child's, which nothing has written yet;
// then each child is built and activated like a created environment. Processes are not cloned. A
// parent that is not active is forked without a freeze (nothing writes
// its trees). A failure before the children are built abandons every
// child (exactly what was made is removed) and leaves the parent thawed;
// a child whose build fails is abandoned, and the others are returned
// with the error.
func Fork(ctx context.Context, reg *records.Records, e Engine, id string, o Options) ([]*api.Env, error) {
	if o.Count < 1 || o.Count > MaxCount {
		return nil, fmt.Errorf("fork: a count of %d is outside 1..%d (the most environments one fork makes); ask for fewer: %w", o.Count, MaxCount, api.ErrInvalid)
	}
	parent, err := reg.Env(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := forkable(parent); err != nil {
		return nil, err
	}
	var s spec.Environment
	if err := json.Unmarshal(parent.Spec, &s); err != nil {
		return nil, fmt.Errorf("fork: reading the parent's spec: %w", err)
	}
	labels := map[string]string{}
	maps.Copy(labels, s.Labels)
	maps.Copy(labels, o.Labels)
	s.Labels = labels
	if o.TTL > 0 {
		s.Lifetime.MaxRuntime, s.Lifetime.UntilStopped = spec.Duration(o.TTL), false
	}
	s.Lifetime.OwnerExit = cmp.Or(o.OwnerExit, s.Lifetime.OwnerExit)
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("fork: the children's spec (the parent's, with the fork's options): %w", err)
	}
	p, err := e.Plan(ctx, s)
	if err != nil {
		return nil, err
	}
	if len(p.Unsupported) > 0 {
		return nil, fmt.Errorf("fork: the parent's spec can't run on this host now: %s: %w", strings.Join(p.Unsupported, "; "), api.ErrUnsupported)
	}
	check := *p
	check.Unsupported, check.Trees, check.Notes = nil, nil, nil
	infos, err := e.PlanView(ctx, &check)
	if err != nil {
		return nil, err
	}

	// The parent's lock: no reaper thaws a freeze in progress, and no
	// stop ends the parent while its trees are taken.
	unlock, err := records.EnvLock(parent.RunDir, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("fork: %s: %w", records.LockReason(err, "a stop or reaper holds the environment"), api.ErrConflict)
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	if parent, err = reg.Env(ctx, id); err != nil {
		return nil, err
	}
	if err := forkable(parent); err != nil {
		return nil, err
	}
	freeze := parent.State == api.EnvActive

	var kids []Child
	origin := &api.ForkOrigin{Parent: parent.ID}
	fail := func(err error) ([]*api.Env, error) {
		for _, c := range kids {
			c.Abandon(fmt.Errorf("fork of %s: %w", parent.ID, err))
		}
		return nil, err
	}
	for i := 0; i < o.Count; i++ {
		c, err := e.Reserve(ctx, p, infos, origin)
		if err != nil {
			return fail(err)
		}
		kids = append(kids, c)
	}
	var fin *registry.Intent
	if freeze {
		fin = &registry.Intent{EnvID: parent.ID, Kind: registry.KindFreeze, Target: registry.FreezeTarget(filepath.Join(parent.CgroupPath, records.CommandsGroup))}
		var b registry.Batch
		b.AddIntent(fin)
		if err := reg.Commit(ctx, &b); err != nil {
			return fail(fmt.Errorf("recording the freeze: %w", err))
		}
	}
	fault.Point(fault.ForkRecorded)

	var g *cgroup.Group
	start := time.Now()
	if freeze {
		g = cgroup.Open(filepath.Join(parent.CgroupPath, records.CommandsGroup))
		if err := g.SetFrozen(true); err != nil {
			thaw(reg, g, fin)
			return fail(err)
		}
		wctx, cancel := context.WithTimeout(ctx, forkFreezeWait)
		_, err := g.WaitEvent(wctx, func(ev cgroup.Events) bool { return ev.Frozen })
		cancel()
		if err != nil {
			thaw(reg, g, fin)
			return fail(fmt.Errorf("fork: the parent's commands did not freeze: %w", err))
		}
		fault.Point(fault.ForkFrozen)
	}
	// Only the first child's trees are taken from the parent's while it
	// is frozen; the others are taken from the first child's after the
	// thaw, which nothing writes before the children are built: the same
	// instant, with the freeze as short as one tree's taking.
	at := time.Now().UTC()
	first := kids[0].Record()
	trees, takeErr := provision.ForkTrees(ctx, first.ID, parent.ID, parent.ID, parent.Trees, p, kids[0].TreeIntents())
	first.Trees = trees
	var frozenFor time.Duration
	if freeze {
		if err := thaw(reg, g, fin); err != nil && takeErr == nil {
			takeErr = err
		}
		frozenFor = time.Since(start)
	}
	unlock()
	locked = false
	if takeErr != nil {
		return fail(takeErr)
	}
	fault.Point(fault.ForkThawed)
	for _, c := range kids[1:] {
		rec := c.Record()
		trees, err := provision.ForkTrees(ctx, rec.ID, parent.ID, first.ID, first.Trees, p, c.TreeIntents())
		rec.Trees = trees
		if err != nil {
			return fail(err)
		}
	}

	ids := make([]string, len(kids))
	for i, c := range kids {
		ids[i] = c.Record().ID
	}
	// The children are built side by side (each its cgroups, limits,
	// keeper and view, and its activation commit), a few at a time.
	errs := make([]error, len(kids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, forkBuilders)
	for i, c := range kids {
		c.Record().Fork = &api.ForkOrigin{Parent: parent.ID, At: &at, Frozen: freeze, FrozenFor: api.Duration(frozenFor), Siblings: ids}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := c.Build(ctx); err != nil {
				errs[i] = fmt.Errorf("fork: child %d of %d: %w", i+1, len(kids), err)
			}
		}()
	}
	wg.Wait()
	// The children made are the caller's to keep or stop, also when a
	// sibling failed (its error is returned with them).
	out := make([]*api.Env, 0, len(kids))
	for i, c := range kids {
		if errs[i] == nil {
			out = append(out, c.Record())
		}
	}
	return out, errors.Join(errs...)
}

// forkable says why env can't be forked, if it can't.
func forkable(env *api.Env) error {
	switch env.State {
	case api.EnvActive:
		if env.CgroupPath == "" {
			return fmt.Errorf("fork: %s runs in the %s tier, without a cgroup to freeze its commands in; stop it first, then fork the stopped environment: %w", env.ID, env.Tier, api.ErrUnsupported)
		}
	case api.EnvStopped:
	default:
		return fmt.Errorf("fork: %s is %s; only an active or stopped environment can be forked: %w", env.ID, env.State, api.ErrInvalid)
	}
	for _, t := range env.Trees {
		if t.State != api.TreeAllocated {
			return fmt.Errorf("fork: tree %s of %s is %s (gc removed it); nothing to fork from: %w", t.Name, env.ID, t.State, api.ErrInvalid)
		}
	}
	return nil
}

// thaw thaws the parent's commands group and settles the freeze intent.
func thaw(reg *records.Records, g *cgroup.Group, in *registry.Intent) error {
	err := g.SetFrozen(false)
	if err == nil || !g.Exists() {
		var b registry.Batch
		b.SettleIntent(in.ID, registry.Fact{Exists: false})
		if cerr := reg.Commit(context.Background(), &b); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	return err
}
