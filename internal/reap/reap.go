package reap

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/export"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/retention"
	"github.com/habemus-papadum/hostfork/internal/systemd"
)

// Engine is what a reap needs of the engine: the operations it finishes
// on an environment it holds the lock of.
type Engine interface {
	// EnvFacts gathers what decide.Env needs about an environment,
	// settling its commands first.
	EnvFacts(ctx context.Context, env *api.Env, cmds []*api.Command) (decide.EnvFacts, []*api.Command)
	// StopCommand stops one command of env for reason.
	StopCommand(ctx context.Context, env *api.Env, c *api.Command, reason api.StopReason) error
	// StopEnv stops env for reason (its lock is held).
	StopEnv(ctx context.Context, env *api.Env, reason api.StopReason) error
	// AbandonCreation finishes a creation whose creator died: what the
	// ledger shows was made is killed and removed, and the environment
	// is recorded as failed.
	AbandonCreation(ctx context.Context, env *api.Env)
	// Launching reports whether this process launched command id and
	// still watches it.
	Launching(id string) bool
}

// Reaper settles one store.
type Reaper struct {
	root string
	reg  *records.Records
	eng  Engine
}

// New is the reaper of the store at root.
func New(root string, reg *records.Records, eng Engine) *Reaper {
	return &Reaper{root: root, reg: reg, eng: eng}
}

// Reap reconciles what the ledger recorded with what exists and finishes
// interrupted work: it settles command records from receipts and kernel
// evidence, stops environments whose stop is due (deadline, owner exit,
// keeper lost, a run whose command ended, a reboot), completes interrupted
// stops and creations, records kept stop decisions, and settles intents
// that never produced a resource. It is idempotent and safe to run
// concurrently with itself and with live runs: each environment is handled
// under its own lock, every record change is a compare-and-set, and
// nothing a live or unverified owner might use is deleted. What it cannot
// settle is reported as pending, with the reason.
func (e *Reaper) Reap(ctx context.Context) (*api.ReapReport, error) {
	rep := &api.ReapReport{Actions: []api.ReapAction{}, Pending: []api.ReapPending{}}
	envs, err := e.reg.Envs(ctx, registry.EnvQuery{States: []api.EnvState{api.EnvCreating, api.EnvActive, api.EnvStopping}})
	if err != nil {
		return nil, err
	}
	for _, env := range envs {
		rep.Checked++
		if err := e.reapEnv(ctx, env, rep); err != nil {
			rep.Pending = append(rep.Pending, api.ReapPending{Env: env.ID, What: "environment", Reason: err.Error()})
		}
	}
	export.Sweep(e.root, rep)
	// Intents of finished environments and commands that were never
	// settled.
	if err := e.reapIntents(ctx, rep); err != nil {
		return rep, err
	}
	e.recordReap(ctx, rep)
	_ = e.reg.Checkpoint(ctx)
	return rep, nil
}

// recordReap puts the reap's actions in the event log.
func (e *Reaper) recordReap(ctx context.Context, rep *api.ReapReport) {
	if len(rep.Actions) == 0 {
		return
	}
	var b registry.Batch
	for _, a := range rep.Actions {
		b.Event(api.Event{Kind: api.EventReap, Env: a.Env, Command: a.Command, Detail: a.Action + detailSuffix(a.Detail)})
	}
	_ = e.reg.Commit(ctx, &b)
}

func detailSuffix(d string) string {
	if d == "" {
		return ""
	}
	return ": " + d
}

func (e *Reaper) reapEnv(ctx context.Context, env *api.Env, rep *api.ReapReport) error {
	unlock, err := records.EnvLock(env.RunDir, 5*time.Second)
	if err != nil {
		rep.Pending = append(rep.Pending, api.ReapPending{Env: env.ID, What: "environment", Reason: records.LockReason(err, "another reaper or stop holds it")})
		return nil
	}
	defer unlock()
	// Re-read under the lock: the decision must be based on current state.
	env, err = e.reg.Env(ctx, env.ID)
	if err != nil {
		return err
	}
	if env.State.Final() {
		return nil
	}
	cmds, err := e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
	if err != nil {
		return err
	}
	before := map[string]int64{}
	for _, c := range cmds {
		before[c.ID] = c.Rev
	}
	f, settled := e.eng.EnvFacts(ctx, env, cmds)
	boot, _ := linux.BootID()
	for _, c := range settled {
		if c.Rev != before[c.ID] {
			rep.Actions = append(rep.Actions, api.ReapAction{Env: env.ID, Command: c.ID, Action: "settled", Detail: "tree " + string(c.TreeState)})
		}
		if c.TreeState == api.PhaseUnverified {
			rep.Pending = append(rep.Pending, api.ReapPending{Env: env.ID, What: "command " + c.ID, Reason: "its guardian's liveness and its tree's exit can't be verified; evidence and capacity are kept (release it explicitly with 'hostfork stop --abandon " + c.ID + "')"})
		}
		// A stop of this command was decided (its reason is recorded) but
		// not carried out: its stopper died. Finish it, unless a stop is in
		// progress.
		dec := records.ReadDecision(filepath.Join(c.Dir, "stop-decision"))
		if !c.Final() && (c.StopReason != "" || dec != "") && c.Guardian != nil && c.Guardian.BootID == boot && stopIdle(c.Dir) {
			reason := cmp.Or(c.StopReason, dec)
			err := e.eng.StopCommand(ctx, env, c, reason)
			reportStop(rep, env.ID, c.ID, "completed-stop", string(reason), err)
		} else if c.Final() && dec != "" {
			// Stopped, but the record missed its reason.
			if c.StopReason == "" {
				n := *c
				n.StopReason = dec
				var b registry.Batch
				b.UpdateCommand(c, &n)
				if e.reg.Commit(ctx, &b) == nil {
					os.Remove(filepath.Join(c.Dir, "stop-decision"))
					rep.Actions = append(rep.Actions, api.ReapAction{Env: env.ID, Command: c.ID, Action: "recorded-stop", Detail: string(dec)})
				}
			} else {
				os.Remove(filepath.Join(c.Dir, "stop-decision"))
			}
		}
	}
	a := decide.Env(*env, f)
	switch {
	case a.Pending != "":
		rep.Pending = append(rep.Pending, api.ReapPending{Env: env.ID, What: "environment", Reason: a.Pending})
		return nil
	case a.AbandonCreation:
		e.eng.AbandonCreation(ctx, env)
		rep.Actions = append(rep.Actions, api.ReapAction{Env: env.ID, Action: "abandoned-creation"})
		return nil
	case a.Stop:
		was := env.State
		err := e.eng.StopEnv(ctx, env, a.Reason)
		action := "stopped"
		if was == api.EnvStopping {
			action = "completed-stop"
		}
		reportStop(rep, env.ID, "", action, string(a.Reason), err)
		return nil
	}
	return nil
}

// reportStop records a stop a reap carried out as action, or as
// api.ReapStopFailed and pending when it did not finish: a stop that did
// not finish is never reported done (issue 39, item 10), and `hostfork
// reap` then exits 1.
func reportStop(rep *api.ReapReport, env, cmd, action, reason string, err error) {
	if err == nil {
		rep.Actions = append(rep.Actions, api.ReapAction{Env: env, Command: cmd, Action: action, Detail: reason})
		return
	}
	rep.Actions = append(rep.Actions, api.ReapAction{Env: env, Command: cmd, Action: api.ReapStopFailed, Detail: reason + detailSuffix(err.Error())})
	what := "environment"
	if cmd != "" {
		what = "command " + cmd
	}
	rep.Pending = append(rep.Pending, api.ReapPending{Env: env, What: what, Reason: "its stop (" + reason + ") did not finish: " + err.Error()})
}

// stopIdle reports whether no stop of the command whose directory is dir
// is in progress (its stop lock is free).
func stopIdle(dir string) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one attempt, no waiting
	unlock, err := records.StopLock(ctx, dir)
	if err != nil {
		return false
	}
	unlock()
	return true
}

// reapIntents settles ledger entries of finished environments and of
// finished commands (also in environments that are still active): an
// intent whose target never appeared is abandoned; an empty cgroup (v2, or
// a v1 limit group) left behind is removed and released. What it can't
// settle is reported as pending on every pass. An environment with work to
// do is handled under its lock, with its intents read again there, so that
// concurrent reapers neither repeat nor race each other's settlements.
func (e *Reaper) reapIntents(ctx context.Context, rep *api.ReapReport) error {
	ins, err := e.reg.Intents(ctx, registry.IntentFilter{Open: true})
	if err != nil {
		return err
	}
	envState := map[string]api.EnvState{}
	var todo []string
	for _, in := range ins {
		// Most entries of a store with many retained runs are evidence
		// that exists: settled without reading the environment's record.
		if slices.Contains(todo, in.EnvID) || retained(in) {
			continue
		}
		st, ok := envState[in.EnvID]
		if !ok {
			env, err := e.reg.Env(ctx, in.EnvID)
			if err != nil {
				continue
			}
			st = env.State
			envState[in.EnvID] = st
		}
		if e.intentDue(ctx, in, st) {
			todo = append(todo, in.EnvID)
		}
	}
	for _, id := range todo {
		env, err := e.reg.Env(ctx, id)
		if err != nil {
			continue
		}
		unlock, err := records.EnvLock(env.RunDir, 5*time.Second)
		if err != nil {
			rep.Pending = append(rep.Pending, api.ReapPending{Env: id, What: "environment", Reason: records.LockReason(err, "another reaper or gc holds it")})
			continue
		}
		// Re-read under the lock: another reaper may have settled them.
		if env, err = e.reg.Env(ctx, id); err == nil {
			if ins, err := e.reg.Intents(ctx, registry.IntentFilter{EnvID: id, Open: true}); err == nil {
				for _, in := range ins {
					if e.intentDue(ctx, in, env.State) {
						e.reapIntent(ctx, env, in, rep)
					}
				}
			}
		}
		unlock()
	}
	return nil
}

// intentDue reports whether reapIntent has something to do with in: its
// owner (the command, else the environment) is finished, and the intent is
// pending, names a cgroup, or names a target that is gone.
func (e *Reaper) intentDue(ctx context.Context, in registry.Intent, envState api.EnvState) bool {
	if in.Kind == registry.KindFreeze {
		// A fork's freeze: open only while a fork holds the
		// environment's lock, or after its forker died.
		return true
	}
	if retained(in) {
		return false
	}
	if in.CommandID != "" {
		// A finished command's resources are settled even while its
		// environment runs on (a failed launch, a command that ended).
		c, err := e.reg.Command(ctx, in.CommandID)
		if err != nil {
			return envState.Final()
		}
		return c.Final() && !e.eng.Launching(c.ID)
	}
	return envState.Final()
}

// retained reports a created resource that still exists and that no
// environment state settles (retained evidence or a tree): nothing to do.
func retained(in registry.Intent) bool {
	if in.State != registry.IntentCreated || in.Kind == registry.KindCgroup || in.Kind == registry.KindCgroupV1 || in.Kind == registry.KindScope {
		return false
	}
	_, err := os.Lstat(in.Target)
	return err == nil
}

func (e *Reaper) settleOne(ctx context.Context, id int64, f registry.Fact) {
	var b registry.Batch
	b.SettleIntent(id, f)
	_ = e.reg.Commit(ctx, &b)
}

// reapIntent settles one due intent, or reports why it can't.
func (e *Reaper) reapIntent(ctx context.Context, env *api.Env, in registry.Intent, rep *api.ReapReport) {
	if in.Kind == registry.KindScope {
		e.reapScopeIntent(ctx, in, rep)
		return
	}
	if in.Kind == registry.KindFreeze {
		// A fork died with the environment's commands frozen (reap holds
		// the environment's lock, so no fork is running): thaw them.
		g := cgroup.Open(registry.FreezeGroup(in.Target))
		if g.Exists() {
			if err := g.SetFrozen(false); err != nil {
				rep.Pending = append(rep.Pending, api.ReapPending{Env: in.EnvID, What: "freeze " + in.Target, Reason: err.Error()})
				return
			}
		}
		e.settleOne(ctx, in.ID, registry.Fact{Exists: false})
		rep.Actions = append(rep.Actions, api.ReapAction{Env: in.EnvID, Action: "thawed", Detail: in.Target})
		return
	}
	_, statErr := os.Lstat(in.Target)
	missing := errors.Is(statErr, os.ErrNotExist)
	act := func(action, detail string) {
		rep.Actions = append(rep.Actions, api.ReapAction{Env: in.EnvID, Command: in.CommandID, Action: action, Detail: detail})
	}
	pend := func(what, reason string) {
		rep.Pending = append(rep.Pending, api.ReapPending{Env: in.EnvID, What: what, Reason: reason})
	}
	if !missing && (in.Kind == registry.KindCgroup || in.Kind == registry.KindCgroupV1) && !cgroup.OnCgroupFS(in.Target) {
		// A ledger entry can only name a cgroup: whatever else is at the
		// path is not hostfork's to remove.
		pend(in.Kind+" "+in.Target, "the path is not on a cgroup filesystem; hostfork removes nothing else for a cgroup intent (check the registry)")
		return
	}
	switch {
	case missing && in.State == registry.IntentPending:
		e.settleOne(ctx, in.ID, registry.Fact{Exists: false})
		act("intent-abandoned", in.Kind+" "+in.Target)
	case missing:
		e.settleOne(ctx, in.ID, registry.Fact{Exists: false})
		act("intent-released", in.Kind+" "+in.Target)
	case in.Kind == registry.KindCgroup:
		g := cgroup.Open(in.Target)
		if ev, err := g.Events(); err == nil && ev.Populated {
			pend("cgroup "+in.Target, "still has processes after its command or environment ended; run 'hostfork stop "+in.EnvID+"'")
			return
		}
		if err := g.Remove(); err != nil {
			pend("cgroup "+in.Target, err.Error())
			return
		}
		e.settleOne(ctx, in.ID, registry.Fact{Exists: false})
		act("cgroup-removed", in.Target)
	case in.Kind == registry.KindCgroupV1:
		// A v1 limit group of a finished environment or command.
		if procs, err := os.ReadFile(filepath.Join(in.Target, "cgroup.procs")); err == nil && len(bytes.TrimSpace(procs)) > 0 {
			pend("cgroup "+in.Target, "still has processes after its environment stopped")
			return
		}
		if err := limits.RemoveV1Dir(in.Target); err != nil {
			pend("cgroup "+in.Target, err.Error())
			return
		}
		e.settleOne(ctx, in.ID, registry.Fact{Exists: false})
		act("cgroup-removed", in.Target)
	case in.State == registry.IntentPending && in.Kind == registry.KindDir:
		// The directory exists: the creation got that far. It is
		// evidence, kept and now recorded.
		e.settleOne(ctx, in.ID, registry.Fact{Exists: true, Identity: records.PathIdentity(in.Target)})
		act("intent-recorded", in.Target)
	case in.State == registry.IntentPending && in.Kind == registry.KindTree:
		// Its identity was never recorded, but the intent names the exact
		// destination, which allocation creates exclusively and uniquely
		// (<env>-<tree> in an allocation area): that is identity enough.
		var why []string
		f, ok := retention.RemoveUnrecordedTree(ctx, e.root, in, &why)
		if !ok {
			pend("tree "+in.Target, "preparation was interrupted before its identity was recorded: "+strings.Join(why, "; "))
			return
		}
		e.settleOne(ctx, in.ID, f)
		act("unrecorded-tree-removed", in.Target)
	case in.State == registry.IntentPending:
		pend(in.Kind+" "+in.Target, "it exists, but its identity was never recorded; check it and remove it by hand (hostfork never deletes what it can't identify)")
	}
}

// reapScopeIntent settles the intent of a systemd scope by asking the
// manager: a unit that is gone or ended is released; a running one is
// stopped (its environment is finished); an unreachable manager leaves it
// pending.
func (e *Reaper) reapScopeIntent(ctx context.Context, in registry.Intent, rep *api.ReapReport) {
	unit := strings.TrimPrefix(in.Target, "systemd:")
	c, err := systemd.Connect(ctx, systemd.DefaultBus(), systemd.Options{})
	if err != nil {
		rep.Pending = append(rep.Pending, api.ReapPending{Env: in.EnvID, What: "scope " + unit, Reason: "no systemd manager answers: " + err.Error()})
		return
	}
	defer c.Close()
	st, err := c.State(ctx, unit)
	if err != nil {
		rep.Pending = append(rep.Pending, api.ReapPending{Env: in.EnvID, What: "scope " + unit, Reason: err.Error()})
		return
	}
	if !st.Gone() && !st.Ended() {
		if _, err := c.StopUnit(ctx, unit); err != nil {
			rep.Pending = append(rep.Pending, api.ReapPending{Env: in.EnvID, What: "scope " + unit, Reason: "stopping it: " + err.Error()})
			return
		}
		rep.Actions = append(rep.Actions, api.ReapAction{Env: in.EnvID, Action: "scope-stopped", Detail: unit})
	}
	e.settleOne(ctx, in.ID, registry.Fact{Exists: false})
	state := "released"
	if in.State == registry.IntentPending && st.Gone() {
		state = "abandoned"
	}
	rep.Actions = append(rep.Actions, api.ReapAction{Env: in.EnvID, Action: "intent-" + state, Detail: "scope " + unit})
}
