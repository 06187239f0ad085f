package engine

import (
	"context"
	"errors"
	"os"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/evidence"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// removeCommandGroups removes a finished command's own cgroups (its
// cgroup2 group, its v1 memory group) and returns what could not be
// removed. A v1 memory group whose OOM-kill counter moved stays until its
// environment ends: cgroup v1 counts a kill in the victim's group only, so
// the environment's limit evidence sums its commands' groups then.
func (e *Engine) removeCommandGroups(ctx context.Context, c *api.Command, g *limits.Group) []string {
	var errs []string
	if c.CgroupPath != "" {
		if err := cgroup.Open(c.CgroupPath).Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err.Error())
		}
	}
	if g != nil && g.Mechanisms[limits.Memory] == limits.Cgroup1 && c.OOM != nil && *c.OOM {
		return errs
	}
	if g != nil {
		if err := g.RemoveCommand(ctx, c.ID); err != nil {
			errs = append(errs, err.Error())
		}
	}
	return errs
}

// commitCommand records n over cur (compare-and-set). A final record
// goes with its command's cgroups removed and its intents settled in the
// same commit (the command's directory stays: it is evidence), and its
// readable snapshot written once committed.
func (e *Engine) commitCommand(ctx context.Context, env *api.Env, cur, n *api.Command) error {
	var b registry.Batch
	if n.Final() {
		n.CleanupErrors = append(append([]string{}, n.CleanupErrors...), e.removeCommandGroups(ctx, n, evidence.LimitGroup(env))...)
		ins, _ := e.reg.Intents(ctx, registry.IntentFilter{EnvID: n.Env, CommandID: n.ID, Open: true})
		override := map[int64]registry.Fact{}
		for _, in := range ins {
			if in.Kind == registry.KindDir {
				override[in.ID] = registry.Fact{Exists: true, Identity: records.PathIdentity(in.Target)}
			}
		}
		records.SettleAll(&b, records.Ptrs(ins), override)
	}
	b.UpdateCommand(cur, n)
	if err := e.reg.Commit(ctx, &b); err != nil {
		return err
	}
	if n.Final() {
		records.WriteCommandRecord(n)
	}
	return nil
}

// settleCommand assesses c from its evidence and, if the facts changed,
// records them with a compare-and-set (and, for a final record, removes
// its cgroups and settles its intents in the same commit). On a conflict
// it reads the newer record and decides again, so a newer decision is
// never rolled back. A command this process launched is left to its
// watcher. The returned record is what the evidence shows, also when it
// could not be recorded (err says why).
func (e *Engine) settleCommand(ctx context.Context, env *api.Env, c *api.Command) (*api.Command, error) {
	if c.Final() {
		return c, nil
	}
	if r := e.runningOf(c.ID); r != nil {
		rec := r.Record()
		return &rec, nil
	}
	cur := c
	for try := 0; try < 5; try++ {
		ev := evidence.Gather(env, cur)
		n, changed := decide.Command(*cur, ev)
		if !changed {
			return &n, nil
		}
		err := e.commitCommand(ctx, env, cur, &n)
		if err == nil {
			return &n, nil
		}
		if !errors.Is(err, registry.ErrConflict) {
			// Recording failed (e.g. a full disk): report the observation
			// anyway; the receipt stays the durable evidence.
			return &n, err
		}
		if cur, err = e.reg.Command(ctx, c.ID); err != nil {
			return nil, err
		}
	}
	return cur, registry.ErrConflict
}
