package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/evidence"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/lockfile"
	"github.com/habemus-papadum/hostfork/internal/provision"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/tree"
)

// StopOptions configure a stop.
type StopOptions struct {
	// Reason is recorded as the requested stop reason (default "user").
	// An earlier recorded reason is kept: the first decision wins.
	Reason api.StopReason
	// Grace is how long members get after SIGTERM before SIGKILL; 0 means
	// the environment's grace (default 2s). Negative means kill at once.
	Grace time.Duration
	// Abandon releases an unverified tree's record (and its environment)
	// without proof that it ended: recorded as reason "abandoned", with
	// what was given up.
	Abandon bool
}

func (e *Engine) grace(env *api.Env, opts StopOptions) time.Duration {
	return max(cmp.Or(opts.Grace, env.Grace.D()), 0)
}

// StopCommand stops one command tree: it tells the guardian the decided
// reason (the receipt carries it; the first reason wins), stops the tree
// with the one tree-stop mechanism (SIGTERM, the grace, the quiesced kill,
// verification), waits for the guardian's receipt, and then records the
// result. A kill never waits for a record: when the registry can't be
// written, the guardian's receipt and a decision file keep the stop for
// the reaper. Nothing is deleted but the command's empty cgroups.
func (e *Engine) StopCommand(ctx context.Context, id string, opts StopOptions) (*api.Command, error) {
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
	n, err := e.stopCommand(ctx, env, c, opts)
	if n != nil {
		if fresh, ferr := e.reg.Env(ctx, env.ID); ferr == nil {
			env = fresh
		}
		e.compute(n, env)
	}
	return n, err
}

func (e *Engine) stopCommand(ctx context.Context, env *api.Env, c *api.Command, opts StopOptions) (*api.Command, error) {
	opts.Reason = cmp.Or(opts.Reason, api.ReasonUser)
	grace := e.grace(env, opts)
	unlock, err := records.StopLock(ctx, c.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("serializing stop of %s: %w", c.ID, err)
	}
	if unlock != nil {
		defer unlock()
	}
	cur, _ := e.settleCommand(ctx, env, c)
	if cur == nil {
		cur = c
	}
	// A launch still at its gate: the environment's stop has closed
	// admission, so its launcher either registered just before (then it is
	// stopped like any tree) or finds the gate revoked and aborts. Wait for
	// one or the other, boundedly.
	for end := time.Now().Add(3 * time.Second); cur.State == api.CommandReserved && time.Now().Before(end) && ctx.Err() == nil; {
		time.Sleep(10 * time.Millisecond)
		if fresh, err := e.reg.Command(ctx, c.ID); err == nil {
			if n, _ := e.settleCommand(ctx, env, fresh); n != nil {
				cur = n
			}
		}
	}
	if cur.Final() {
		return cur, nil
	}
	if opts.Abandon {
		return e.abandonCommand(ctx, env, cur)
	}
	boot, _ := linux.BootID()
	if cur.Guardian != nil && cur.Guardian.BootID != boot {
		// Another boot: the whole former lifetime ended; nothing is
		// signalled or killed (the evidence proves the exit).
		return cur, fmt.Errorf("stopping %s: recorded in another boot, yet not settled: %w", cur.ID, api.ErrUnverified)
	}
	rcpt := evidence.Receipt(cur)
	var rr api.StopReason
	if rcpt != nil {
		rr = rcpt.StopReason
	}
	reason := decide.StopReason(cur.StopReason, rr, opts.Reason)
	if cur.Tier == api.TierSubreaper && cur.Guardian != nil {
		// Without a cgroup the guardian is the tree's only witness: the
		// recorded identity must be the one its own receipt names.
		if err := evidence.GuardianMatchesReceipt(cur); err != nil {
			return cur, fmt.Errorf("not stopping %s: %v: %w", cur.ID, err, api.ErrUnverified)
		}
	}
	// Keep the decision beside the evidence first: the guardian records
	// the reason too, but only once it has handled the notice, and a
	// reaper that runs after this stopper died must find the decision at
	// once (class 11; the environment's stop does the same).
	decision := filepath.Join(c.Dir, "stop-decision")
	records.KeepDecision(decision, reason)
	// Tell the guardian (a notice: it records the reason and keeps a
	// backup kill in case this stopper dies), then kill. The pidfd is
	// opened before the proof is checked, so the process checked is the
	// one signalled.
	if cur.Guardian != nil {
		if p, err := linux.OpenVerified(records.ToLinux(cur.Guardian)); err == nil {
			if evidence.GuardianProven(env, cur) == nil {
				_ = p.SignalValue(syscall.SIGTERM, supervise.StopValue(reason, true, grace))
			}
			p.Close()
		}
	}
	fault.Point(fault.StopRecorded)
	res, stopErr := tree.Stop(ctx, evidence.Target(env, cur), grace)
	fault.Point(fault.StopKilled)
	// The guardian now reaps what is left and writes its receipt.
	waitGone(ctx, cur.Guardian, 2*time.Second)
	// A guardian that can't (stopped, its children zombies) is ended
	// here: the zombies then go to init, and that is the tree's end.
	stuck := false
	if cur.Guardian != nil && len(res.Survivors) == 0 && tree.StuckWithZombies(records.ToLinux(cur.Guardian)) {
		if p, err := linux.OpenVerified(records.ToLinux(cur.Guardian)); err == nil {
			stuck = p.Signal(syscall.SIGKILL) == nil && p.WaitExit(ctx, 2*time.Second)
			p.Close()
		}
	}
	if r := e.runningOf(cur.ID); r != nil {
		// This process launched it: its watcher records the result.
		select {
		case <-r.TreeDone():
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		rec := r.Record()
		records.DropDecision(decision, &rec)
		return &rec, stopErrOf(&rec, res, stopErr)
	}
	final, err := e.recordStop(ctx, env, cur, reason, res, stuck)
	if err != nil && final == nil {
		return cur, err
	}
	if err == nil {
		records.DropDecision(decision, final)
	}
	if err := stopErrOf(final, res, stopErr); err != nil {
		return final, err
	}
	return final, err
}

// stopErrOf is the error a stop returns: survivors, or a tree that is
// still not proven gone.
func stopErrOf(rec *api.Command, res tree.Result, stopErr error) error {
	if stopErr != nil {
		return fmt.Errorf("stopping %s: %w", rec.ID, stopErr)
	}
	if !rec.Final() {
		return fmt.Errorf("stopping %s: tree is %s: %w", rec.ID, rec.TreeState, api.ErrUnverified)
	}
	return nil
}

// recordStop records a stop's outcome: the first stop reason, and
// whatever the evidence now proves. When the registry can't be written,
// the decision is kept in the command's directory for the reaper.
func (e *Engine) recordStop(ctx context.Context, env *api.Env, c *api.Command, reason api.StopReason, res tree.Result, stuckKilled bool) (*api.Command, error) {
	cur := c
	for try := 0; try < 5; try++ {
		if cur.Final() {
			// Recorded meanwhile (its launcher's watcher, a reader): the
			// first final record stands.
			return cur, nil
		}
		ev := evidence.Gather(env, cur)
		ev.StuckGuardianKilled = stuckKilled && ev.Guardian == decide.Gone
		n, _ := decide.Command(*cur, ev)
		if n.StopReason == "" && !(n.Final() && n.LeaderState == api.PhaseExited && !n.StoppedByHostfork && res.Signalled == 0 && res.Killed == 0) {
			n.StopReason = reason
		}
		if len(res.Survivors) > 0 {
			n.Survivors = nil
			for _, s := range res.Survivors {
				n.Survivors = append(n.Survivors, *records.ToAPI(s))
			}
			if ev.Guardian == decide.Gone {
				n.State, n.TreeState = api.CommandUnverified, api.PhaseUnverified
				n.TreeEvidence = "a stop could not end every process of the tree, and its guardian is gone"
			}
		}
		err := e.commitCommand(ctx, env, cur, &n)
		if err == nil {
			return &n, nil
		}
		if !errors.Is(err, registry.ErrConflict) {
			records.KeepDecision(filepath.Join(c.Dir, "stop-decision"), reason)
			return &n, fmt.Errorf("the tree was stopped, but the record could not be written (%v); the decision is kept in %s and 'hostfork reap' records it: %w", err, filepath.Join(c.Dir, "stop-decision"), err)
		}
		fresh, rerr := e.reg.Command(ctx, c.ID)
		if rerr != nil {
			return &n, rerr
		}
		cur = fresh
	}
	return cur, registry.ErrConflict
}

// waitGone waits (bounded) for a recorded process to exit.
func waitGone(ctx context.Context, id *api.Identity, limit time.Duration) {
	if id == nil {
		return
	}
	p, err := linux.OpenVerified(records.ToLinux(id))
	if err != nil {
		return
	}
	defer p.Close()
	p.WaitExit(ctx, limit)
}

// abandonCommand releases an unverified command's record without proof of
// its end: the operator's explicit, recorded choice.
func (e *Engine) abandonCommand(ctx context.Context, env *api.Env, c *api.Command) (*api.Command, error) {
	if c.TreeState != api.PhaseUnverified && c.State != api.CommandUnverified {
		return c, fmt.Errorf("command %s is %s, not unverified: stop it normally (--abandon only releases what can't be verified): %w", c.ID, decide.LivenessOf(c), api.ErrInvalid)
	}
	n := *c
	n.State = api.CommandExited
	n.StopReason = api.ReasonAbandoned
	if n.LeaderState != api.PhaseExited {
		// Released, not ended: a record that says exited must not say
		// its leader is live (issue 39, item 9).
		n.LeaderState = api.PhaseUnknown
		if n.Workload != nil && records.Liveness(n.Workload) == decide.Gone {
			n.LeaderState = api.PhaseExited
		}
	}
	n.TreeEvidence = "abandoned by the operator: its exit was never verified; processes it may have left are no longer owned"
	now := time.Now().UTC()
	n.TreeExitedAt = &now
	var b registry.Batch
	b.UpdateCommand(c, &n)
	if err := e.reg.Commit(ctx, &b); err != nil {
		return c, err
	}
	return &n, nil
}

// envFinish is what ending an environment's execution did: the keeper, the
// scope and the cgroups are gone (or why not), the limit evidence read.
type envFinish struct {
	reason     api.StopReason
	cleanup    []string
	evidence   *api.LimitsEvidence
	result     string // the systemd manager's
	stopped    time.Time
	facts      map[int64]registry.Fact
	intents    []*registry.Intent
	except     string // a command whose own intents its launcher settles
	incomplete error
}

// finishEnv ends an environment's execution once its commands are
// stopped: leftovers in its commands group are stopped with the tree-stop
// mechanism, the keeper and the scope end, the environment's cgroups and
// limit groups are removed (their counters read first). Files stay.
func (e *Engine) finishEnv(ctx context.Context, env *api.Env, reason api.StopReason, except string) envFinish {
	f := envFinish{reason: reason, facts: map[int64]registry.Fact{}, except: except}
	boot, _ := linux.BootID()
	otherBoot := env.BootID != boot
	if env.CgroupPath != "" && !otherBoot {
		// Anything left in the commands group (a stray member, a command
		// whose stop failed) goes with the environment; the guardians are
		// roots, never members.
		t := tree.Target{Cgroup: filepath.Join(env.CgroupPath, cgCommands), Subreapers: true}
		if m, err := cgroup.FindMount(); err == nil {
			t.Mount = m.Path
		}
		if pids, err := cgroup.Open(filepath.Join(env.CgroupPath, cgGuardians)).Procs(); err == nil {
			for _, pid := range pids {
				if id, err := linux.IdentityOf(pid); err == nil {
					t.Roots = append(t.Roots, id)
				}
			}
		}
		if members, _ := tree.Members(t); len(members) > 0 {
			if _, err := tree.Stop(ctx, t, env.Grace.D()); err != nil {
				f.incomplete = err
				f.cleanup = append(f.cleanup, err.Error())
			}
		}
		// Guardians write their receipts and exit once their trees are
		// gone.
		for _, r := range t.Roots {
			waitGone(ctx, records.ToAPI(r), 2*time.Second)
		}
	}
	if env.Keeper != nil && !otherBoot {
		// The view is released once its keeper and the commands that
		// joined it are gone. Trees stay.
		supervise.StopKeeper(ctx, records.ToLinux(env.Keeper))
	}
	if env.Unit != "" && !otherBoot {
		if err := provision.StopScope(ctx, env); err != nil {
			f.cleanup = append(f.cleanup, err.Error())
		}
		f.result = env.ManagerResult
	}
	if env.CgroupPath != "" {
		if err := cgroup.Open(env.CgroupPath).Remove(envSubgroups...); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.cleanup = append(f.cleanup, err.Error())
		}
	}
	if lg := evidence.LimitGroup(env); lg != nil {
		ev := lg.Evidence()
		f.evidence = &ev
		if err := lg.Remove(ctx); err != nil {
			f.cleanup = append(f.cleanup, err.Error())
		}
	}
	fault.Point(fault.Finalize)
	f.stopped = time.Now().UTC()
	ins, _ := e.reg.Intents(ctx, registry.IntentFilter{EnvID: env.ID, Open: true})
	for i := range ins {
		in := ins[i]
		if in.CommandID != "" && in.CommandID == except {
			continue
		}
		switch in.Kind {
		case registry.KindTree:
			continue // trees stay: retention decides
		case registry.KindDir:
			if _, err := os.Lstat(in.Target); err == nil {
				f.facts[in.ID] = registry.Fact{Exists: true, Identity: records.PathIdentity(in.Target)}
			}
		case registry.KindScope:
			if f.result != "" || otherBoot {
				f.facts[in.ID] = registry.Fact{Exists: false}
			} else {
				continue
			}
		}
		f.intents = append(f.intents, &ins[i])
	}
	return f
}

// next is the environment's stopped record from its current one (nil when
// it is already final).
func (f envFinish) next(cur *api.Env) *api.Env {
	if cur.State.Final() {
		return nil
	}
	n := *cur
	if f.incomplete == nil {
		n.State = api.EnvStopped
		n.StoppedAt = &f.stopped
	} else {
		n.State = api.EnvStopping
	}
	if n.StopReason == "" {
		n.StopReason = f.reason
		n.StopRequestedAt = &f.stopped
	}
	n.CleanupErrors = append(append([]string{}, cur.CleanupErrors...), f.cleanup...)
	if f.evidence != nil {
		n.LimitEvidence = f.evidence
	}
	n.ManagerResult = cmp.Or(f.result, n.ManagerResult)
	return &n
}

// settle adds the environment's intent settlements to b.
func (f envFinish) settle(b *registry.Batch) { records.SettleAll(b, f.intents, f.facts) }

// StopEnv stops every command of an environment, confirms their exit,
// ends the keeper and the scope, removes the environment's empty cgroups
// and records the stop. It deletes no file: logs, receipts and trees stay.
// Admission closes first, but the kill never waits for that record: a
// registry another writer holds, or a full filesystem, can't delay it.
func (e *Engine) StopEnv(ctx context.Context, id string, opts StopOptions) (*api.Env, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	opts.Reason = cmp.Or(opts.Reason, api.ReasonUser)
	env, err := e.reg.Env(ctx, id)
	if err != nil {
		return nil, err
	}
	if env.State.Final() {
		cmds, _ := e.reg.Commands(ctx, registry.CommandQuery{Env: id})
		return e.reconcile(ctx, env, cmds, true), nil
	}
	unlock, err := records.EnvLock(env.RunDir, 30*time.Second)
	if errors.Is(err, lockfile.ErrBusy) {
		return env, fmt.Errorf("environment %s: another stop or reaper holds it; try again: %w", id, api.ErrConflict)
	}
	if err != nil {
		return env, fmt.Errorf("environment %s: %w", id, err)
	}
	if env, err = e.reg.Env(ctx, id); err != nil {
		unlock()
		return nil, err
	}
	n, err := e.stopEnvLocked(ctx, env, opts)
	unlock()
	if n != nil {
		// The record a reader would show: its commands and computed
		// fields.
		if cmds, cerr := e.reg.Commands(ctx, registry.CommandQuery{Env: id}); cerr == nil {
			n = e.reconcile(ctx, n, cmds, true)
		}
	}
	return n, err
}

// stopEnvLocked is StopEnv with the environment's lock held.
func (e *Engine) stopEnvLocked(ctx context.Context, env *api.Env, opts StopOptions) (*api.Env, error) {
	id := env.ID
	opts.Reason = cmp.Or(opts.Reason, api.ReasonUser)
	if env.State.Final() {
		return env, nil
	}
	reason := decide.StopReason(env.StopReason, records.ReadDecision(filepath.Join(env.RunDir, "stop-decision")), opts.Reason)
	// The decision is kept beside the evidence before anything is
	// stopped, so that a stopper killed at any point leaves a stop the
	// reaper completes (the record may not have it yet: admission closes
	// in parallel with the kill). It is removed once the stop is
	// recorded.
	records.KeepDecision(filepath.Join(env.RunDir, "stop-decision"), reason)
	// Close admission, in parallel with the kill.
	closed := make(chan error, 1)
	go func() {
		now := time.Now().UTC()
		for try := 0; try < 5; try++ {
			cur, err := e.reg.Env(ctx, id)
			if err != nil {
				closed <- err
				return
			}
			if cur.State != api.EnvActive && cur.State != api.EnvCreating {
				closed <- nil
				return
			}
			n := *cur
			n.State = api.EnvStopping
			if n.StopReason == "" {
				n.StopReason, n.StopRequestedAt = reason, &now
			}
			var b registry.Batch
			b.UpdateEnv(cur, &n)
			err = e.reg.Commit(ctx, &b)
			if err == nil || !errors.Is(err, registry.ErrConflict) {
				if err != nil {
					records.KeepDecision(filepath.Join(env.RunDir, "stop-decision"), reason)
				}
				closed <- err
				return
			}
		}
		closed <- registry.ErrConflict
	}()
	if opts.Abandon {
		<-closed
		return e.abandonEnv(ctx, env)
	}
	tried := map[string]bool{}
	errs := e.stopCommands(ctx, env, reason, opts, tried)
	cerr := <-closed
	// A launch that registered before admission closed is stopped too
	// (only those: the first pass's failures are said once).
	errs = append(errs, e.stopCommands(ctx, env, reason, opts, tried)...)
	fin := e.finishEnv(ctx, env, reason, "")
	if fin.incomplete != nil {
		errs = append(errs, fin.incomplete)
	}
	var final *api.Env
	for try := 0; try < 5; try++ {
		cur, err := e.reg.Env(ctx, id)
		if err != nil {
			break
		}
		n := fin.next(cur)
		if n == nil {
			final = cur
			break
		}
		if len(errs) > 0 {
			n.State = api.EnvStopping
			n.StoppedAt = nil
		}
		var b registry.Batch
		b.UpdateEnv(cur, n)
		fin.settle(&b)
		err = e.reg.Commit(ctx, &b)
		if err == nil {
			final = n
			if len(errs) == 0 {
				os.Remove(filepath.Join(env.RunDir, "stop-decision"))
			}
			break
		}
		if !errors.Is(err, registry.ErrConflict) {
			records.KeepDecision(filepath.Join(env.RunDir, "stop-decision"), reason)
			errs = append(errs, fmt.Errorf("the environment was stopped, but the record could not be written (%v); the decision is kept in %s and 'hostfork reap' records it: %w", err, filepath.Join(env.RunDir, "stop-decision"), err))
			break
		}
	}
	if cerr != nil && !errors.Is(cerr, registry.ErrConflict) && final == nil {
		errs = append(errs, fmt.Errorf("closing admission: %w", cerr))
	}
	e.reg.WriteManifest(ctx, id)
	if final == nil {
		final = env
	}
	return final, errors.Join(errs...)
}

// stopCommands stops every live command of env in parallel.
func (e *Engine) stopCommands(ctx context.Context, env *api.Env, reason api.StopReason, opts StopOptions, tried map[string]bool) []error {
	cmds, err := e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
	if err != nil {
		return []error{err}
	}
	type result struct{ err error }
	results := make(chan result, len(cmds))
	pending := 0
	for _, c := range cmds {
		if c.Final() || tried[c.ID] {
			continue
		}
		tried[c.ID] = true
		pending++
		go func(c *api.Command) {
			_, err := e.stopCommand(ctx, env, c, StopOptions{Reason: reason, Grace: opts.Grace})
			results <- result{err}
		}(c)
	}
	var errs []error
	for ; pending > 0; pending-- {
		if r := <-results; r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return errs
}

// abandonEnv releases an environment whose commands can't be verified,
// with the operator's explicit, recorded choice: each unverified command
// is recorded abandoned, and the environment stopped, saying what was
// given up.
func (e *Engine) abandonEnv(ctx context.Context, env *api.Env) (*api.Env, error) {
	cmds, err := e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
	if err != nil {
		return env, err
	}
	var gaveUp []string
	for _, c := range cmds {
		if c.Final() {
			continue
		}
		n, _ := e.settleCommand(ctx, env, c)
		if n != nil && !n.Final() {
			if decide.LivenessOf(n) == api.Alive {
				return env, fmt.Errorf("command %s is alive: stop it (or the environment) normally; --abandon only releases what can't be verified: %w", n.ID, api.ErrInvalid)
			}
			if _, err := e.abandonCommand(ctx, env, n); err != nil {
				return env, err
			}
			gaveUp = append(gaveUp, fmt.Sprintf("command %s: its tree's exit was never verified; processes it may have left are no longer owned", n.ID))
		}
	}
	fin := e.finishEnv(ctx, env, api.ReasonAbandoned, "")
	cur, err := e.reg.Env(ctx, env.ID)
	if err != nil {
		return env, err
	}
	n := fin.next(cur)
	if n == nil {
		return cur, nil
	}
	n.State, n.StoppedAt = api.EnvStopped, &fin.stopped
	if n.StopReason == "" || n.StopReason == api.ReasonUser {
		n.StopReason = api.ReasonAbandoned
	}
	n.Abandoned = append(n.Abandoned, gaveUp...)
	var b registry.Batch
	b.UpdateEnv(cur, n)
	fin.settle(&b)
	if err := e.reg.Commit(ctx, &b); err != nil {
		return cur, err
	}
	e.reg.WriteManifest(ctx, env.ID)
	return n, nil
}
