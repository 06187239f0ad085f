package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/evidence"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// Resolve finds the environment or command an id (or unique prefix)
// names: kind is "env" or "command".
func (e *Engine) Resolve(ctx context.Context, prefix string) (kind, id string, err error) {
	if err := e.checkOpen(); err != nil {
		return "", "", err
	}
	return e.reg.Resolve(ctx, prefix)
}

// liveStates are the recorded command states a live or unverified tree
// can have.
var liveStates = []api.CommandState{api.CommandReserved, api.CommandRunning, api.CommandUnverified}

// Commands lists commands by filter, oldest first, each settled from its
// evidence and with the reader's computed fields.
func (e *Engine) Commands(ctx context.Context, f api.CommandFilter) ([]api.Command, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	if err := f.Labels.Validate(); err != nil {
		return nil, err
	}
	q := registry.CommandQuery{Env: f.Env, States: f.States, Labels: f.Labels, Brief: f.Brief}
	if f.Live && len(q.States) == 0 {
		q.States = liveStates
	}
	cmds, err := e.reg.Commands(ctx, q)
	if err != nil {
		return nil, err
	}
	// A final command needs nothing of its environment but the deadline:
	// those are read in one query (none for a brief listing, which has no
	// deadlines). Live ones are settled against their whole environment
	// record.
	var finalEnvs []string
	for _, c := range cmds {
		if c.Final() && !f.Brief {
			finalEnvs = append(finalEnvs, c.Env)
		}
	}
	deadlines, err := e.reg.EnvDeadlines(ctx, slices.Compact(slices.Sorted(slices.Values(finalEnvs))))
	if err != nil {
		return nil, err
	}
	envs := map[string]*api.Env{}
	out := make([]api.Command, 0, len(cmds))
	for _, c := range cmds {
		if c.Final() {
			evidence.Compute(c, deadlines[c.Env])
		} else {
			if f.Brief {
				// Settling needs the whole record.
				if c, err = e.reg.Command(ctx, c.ID); err != nil {
					continue
				}
			}
			env := envs[c.Env]
			if env == nil {
				if env, err = e.reg.Env(ctx, c.Env); err != nil {
					continue
				}
				envs[c.Env] = env
			}
			if n, _ := e.settleCommand(ctx, env, c); n != nil {
				c = n
			}
			e.compute(c, env)
		}
		if f.Live && c.Liveness == api.Exited {
			continue
		}
		if len(f.States) > 0 && !slices.Contains(f.States, c.State) {
			continue
		}
		out = append(out, *c)
	}
	return out, nil
}

// compute fills a command's reader-computed fields.
func (e *Engine) compute(c *api.Command, env *api.Env) {
	var deadline *time.Time
	if env != nil {
		deadline = env.DeadlineAt
	}
	evidence.Compute(c, deadline)
}

// Command reads one command (by exact id), settled and computed.
func (e *Engine) Command(ctx context.Context, id string) (*api.Command, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	c, err := e.reg.Command(ctx, id)
	if err != nil {
		return nil, err
	}
	env, err := e.reg.Env(ctx, c.Env)
	if err != nil {
		return nil, err
	}
	if n, _ := e.settleCommand(ctx, env, c); n != nil {
		c = n
	}
	e.compute(c, env)
	return c, nil
}

// Envs lists environments by filter, oldest first. A reader computes what
// it can prove now: each environment that is not final is reconciled
// from its evidence, and when its stop is due and nothing of it runs any
// more (the guardians and the keeper did the stopping), the reader
// finishes the bookkeeping — records the stop and removes the empty
// cgroups.
func (e *Engine) Envs(ctx context.Context, f api.EnvFilter) ([]api.Env, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	if err := f.Labels.Validate(); err != nil {
		return nil, err
	}
	q := registry.EnvQuery{States: f.States, Labels: f.Labels}
	if f.Active && len(q.States) == 0 {
		q.States = []api.EnvState{api.EnvCreating, api.EnvActive, api.EnvStopping}
	}
	envs, err := e.reg.Envs(ctx, q)
	if err != nil {
		return nil, err
	}
	var cmdsOf map[string][]*api.Command
	if f.WithCommands && len(envs) > 0 {
		cmdsOf = map[string][]*api.Command{}
		var ids []string
		if len(envs) <= 500 {
			for _, env := range envs {
				ids = append(ids, env.ID)
			}
		}
		all, err := e.reg.Commands(ctx, registry.CommandQuery{Envs: ids})
		if err != nil {
			return nil, err
		}
		for _, c := range all {
			cmdsOf[c.Env] = append(cmdsOf[c.Env], c)
		}
	}
	out := make([]api.Env, 0, len(envs))
	for _, env := range envs {
		var cmds []*api.Command
		if cmdsOf != nil {
			cmds = cmdsOf[env.ID]
		}
		env = e.reconcile(ctx, env, cmds, cmdsOf != nil)
		if f.Active && env.State.Final() {
			continue
		}
		if len(f.States) > 0 && !slices.Contains(f.States, env.State) {
			continue
		}
		out = append(out, *env)
	}
	return out, nil
}

// Env reads one environment (by exact id) with its commands, reconciled.
func (e *Engine) Env(ctx context.Context, id string) (*api.Env, error) {
	return e.readEnv(ctx, id, false)
}

// EnvOpen reads an environment for a handle (Host.OpenEnv): reconciled as
// Env does, but from its commands that are not final (all of them for an
// auto-stop environment, which the exit of its commands ends), and with no
// Commands. A final command adds nothing to the reconciliation, so opening
// costs the same however many commands the environment has run.
func (e *Engine) EnvOpen(ctx context.Context, id string) (*api.Env, error) {
	return e.readEnv(ctx, id, true)
}

// readEnv reads an environment reconciled from its commands: all of them,
// and in its record, unless live (then only those not final, except for
// an auto-stop environment, and none in the record).
func (e *Engine) readEnv(ctx context.Context, id string, live bool) (*api.Env, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	env, err := e.reg.Env(ctx, id)
	if err != nil {
		return nil, err
	}
	q := registry.CommandQuery{Env: id}
	if live && !env.AutoStop {
		q.States = liveStates
	}
	cmds, err := e.reg.Commands(ctx, q)
	if err != nil {
		return nil, err
	}
	env = e.reconcile(ctx, env, cmds, true)
	if live {
		env.Commands = nil
	}
	return env, nil
}

// envFacts gathers what decide.Env needs about an environment, settling
// its commands first.
func (e *Engine) envFacts(ctx context.Context, env *api.Env, cmds []*api.Command) (decide.EnvFacts, []*api.Command) {
	boot, _ := linux.BootID()
	f := decide.EnvFacts{NowMono: linux.MonotonicNow(), BootID: boot, Owner: records.Liveness(env.Owner)}
	if env.Keeper != nil {
		f.Keeper = records.Liveness(env.Keeper)
	}
	f.Decided = records.ReadDecision(filepath.Join(env.RunDir, "stop-decision"))
	if env.Tier == api.TierCgroup2 && env.CgroupPath != "" {
		_, err := os.Stat(env.CgroupPath)
		f.GroupGone = errors.Is(err, os.ErrNotExist)
	}
	settled := make([]*api.Command, 0, len(cmds))
	for _, c := range cmds {
		n, _ := e.settleCommand(ctx, env, c)
		if n == nil {
			n = c
		}
		settled = append(settled, n)
		f.Commands = append(f.Commands, *n)
	}
	return f, settled
}

// reconcile settles an environment that is not final and fills the
// reader's computed fields (and its commands, when given).
func (e *Engine) reconcile(ctx context.Context, env *api.Env, cmds []*api.Command, with bool) *api.Env {
	if !env.State.Final() {
		if !with {
			cmds, _ = e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
		}
		facts, settled := e.envFacts(ctx, env, cmds)
		if with {
			cmds = settled
		}
		a := decide.Env(*env, facts)
		env.Due = a.Due
		if a.Stop && a.Quiet && e.runningOf(envRunner(e, env.ID)) == nil {
			// Nothing of it runs any more: finish the bookkeeping the
			// guardians and the keeper could not (they don't write the
			// registry).
			if unlock, err := records.EnvLock(env.RunDir, 0); err == nil {
				if n, err := e.stopEnvLocked(ctx, env, StopOptions{Reason: a.Reason}); err == nil && n != nil {
					env = n
					env.Due = ""
					if with {
						cmds, _ = e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
					}
				}
				unlock()
			}
		}
	}
	env.LimitsNow = nil
	if g := evidence.LimitGroup(env); g != nil && !env.State.Final() {
		ev := g.Evidence()
		env.LimitsNow = &ev
	}
	boot, _ := linux.BootID()
	env.OwnerAlive = records.LivenessText(records.Liveness(env.Owner))
	env.Expired = env.DeadlineMono > 0 && (env.BootID != boot || linux.MonotonicNow() >= env.DeadlineMono)
	if env.Trees == nil {
		env.Trees = []api.Tree{}
	}
	if env.CleanupErrors == nil {
		env.CleanupErrors = []string{}
	}
	env.Commands = nil
	if with {
		env.Commands = make([]api.Command, 0, len(cmds))
		for _, c := range cmds {
			e.compute(c, env)
			env.Commands = append(env.Commands, *c)
		}
	}
	return env
}

// envRunner is the id of a command of env this process is running (""
// none): its watcher, not a reader, records that environment's stop.
func envRunner(e *Engine, envID string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, r := range e.running {
		if r.env.ID == envID {
			return id
		}
	}
	return ""
}
