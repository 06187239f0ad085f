package hostfork

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/supervise"
)

// Stop reasons recorded on results.
const (
	ReasonUser      = "user"
	ReasonDeadline  = "deadline"
	ReasonIdle      = "idle"
	ReasonOwnerExit = "owner-exit"
	ReasonLimit     = "limit"
)

// StopOptions configure a stop.
type StopOptions struct {
	// Reason is recorded as the requested stop reason (default "user").
	// An earlier recorded reason is kept: the first decision wins.
	Reason string
	// Grace is how long members get after SIGTERM before SIGKILL; 0 means
	// the environment's grace (default 2s). Negative means kill at once.
	Grace time.Duration
}

// stopLock serializes overlapping stops of one tree across processes.
func stopLock(ctx context.Context, dir string) (func(), error) {
	return lockFile(ctx, filepath.Join(dir, "stop.lock"), 5*time.Millisecond)
}

// lockFile takes an exclusive flock on path (created if missing), polling
// every step until it is free or ctx ends. The returned func releases it.
func lockFile(ctx context.Context, path string, step time.Duration) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(step):
		}
	}
}

// StopCommand stops one command tree (by id or unique prefix): it records
// the requested reason, then (cgroup2 tier) sends SIGTERM to every member,
// waits up to the grace, freezes the tree, checks that membership is
// stable, kills it with cgroup.kill and verifies the cgroup is empty. In the
// subreaper tier the guardian is asked (by a verified signal) to do the
// same. Nothing is deleted but the empty cgroup. Recording failures never
// prevent the kill.
func (h *Host) StopCommand(ctx context.Context, idPrefix string, opts StopOptions) (*registry.Command, error) {
	kind, id, err := h.reg.Resolve(ctx, idPrefix)
	if err != nil {
		return nil, err
	}
	if kind != "command" {
		return nil, fmt.Errorf("%s is an environment (use StopEnv): %w", id, ErrNotFound)
	}
	c, err := h.reg.Command(ctx, id)
	if err != nil {
		return nil, err
	}
	env, err := h.reg.Env(ctx, c.EnvID)
	if err != nil {
		return nil, err
	}
	return h.stopCommand(ctx, env, c, opts)
}

func (h *Host) stopCommand(ctx context.Context, env *registry.Env, c *registry.Command, opts StopOptions) (*registry.Command, error) {
	if opts.Reason == "" {
		opts.Reason = ReasonUser
	}
	grace := opts.Grace
	if grace == 0 {
		grace = env.Grace
	}
	if grace < 0 {
		grace = 0
	}
	unlock, err := stopLock(ctx, c.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("serializing stop of %s: %w", c.ID, err)
	}
	if unlock != nil {
		defer unlock()
	}
	cur, _ := h.settleCommand(ctx, c)
	if cur == nil {
		cur = c
	}
	// A launch still at its gate: the environment's stop has closed
	// admission, so its launcher either registered just before (then it is
	// stopped like any tree) or finds the gate revoked and aborts. Wait for
	// one or the other, boundedly.
	for end := time.Now().Add(3 * time.Second); cur.State == registry.CmdReserved && time.Now().Before(end) && ctx.Err() == nil; {
		time.Sleep(10 * time.Millisecond)
		if fresh, err := h.reg.Command(ctx, c.ID); err == nil {
			if n, _ := h.settleCommand(ctx, fresh); n != nil {
				cur = n
			} else {
				cur = fresh
			}
		}
	}
	if cur.Terminal() {
		return cur, nil
	}
	if boot, _ := linux.BootID(); env.BootID != boot {
		// Another boot: the whole former lifetime ended; nothing is
		// signalled or killed (settleCommand proves the exit).
		return cur, fmt.Errorf("stopping %s: recorded in another boot, yet not settled: %w", cur.ID, ErrStopIncomplete)
	}
	// A tree whose leader has exited and whose workload group is already
	// empty ended on its own: nobody stops it, so no reason is recorded
	// (run stops its environment at every leader exit).
	endedByItself := false
	if cur.CgroupPath != "" && cur.LeaderState == registry.Exited {
		ev, err := cgroup.Open(filepath.Join(cur.CgroupPath, "workload")).Events()
		endedByItself = errors.Is(err, os.ErrNotExist) || (err == nil && !ev.Populated)
	}
	// Record the decision first; a full disk must not prevent the kill.
	if cur.StopReason == "" && !endedByItself {
		n := *cur
		n.StopReason = opts.Reason
		if err := h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.UpdateCommand(&n) }); err == nil {
			cur = &n
		} else if errors.Is(err, registry.ErrConflict) {
			if fresh, err := h.reg.Command(ctx, c.ID); err == nil {
				cur = fresh
			}
		}
	}
	fault.Point(fault.StopRecorded)
	var stopErr error
	var cleanup []string
	if cur.CgroupPath != "" {
		stopErr = stopCgroupTree(ctx, filepath.Join(cur.CgroupPath, "workload"), grace)
		fault.Point(fault.StopKilled)
		// The guardian now reaps what is left and writes its receipt.
		waitGuardian(ctx, cur, 2*time.Second)
		if linux.Assess(linuxIdentity(cur.Guardian)) == linux.Alive {
			// A guardian that does not finish is killed too; the cgroup is
			// then the tree-exit evidence.
			g := cgroup.Open(cur.CgroupPath)
			_ = g.Kill()
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = g.WaitEmpty(wctx)
			cancel()
		}
	} else if cur.Guardian != nil {
		// Subreaper tier: the guardian owns the tree; SIGTERM asks it to
		// stop it with its grace. Without a cgroup to check membership,
		// the recorded identity must also be the one the guardian wrote
		// into its own receipt (the proof file registered at launch);
		// then it is re-verified against the running process.
		if err := guardianMatchesReceipt(cur); err != nil {
			stopErr = fmt.Errorf("not signalling guardian %v: %w", cur.Guardian, err)
		} else {
			err := linux.SignalVerified(linuxIdentity(cur.Guardian), syscall.SIGTERM)
			if err != nil && !errors.Is(err, linux.ErrNoProcess) && !errors.Is(err, linux.ErrIdentityMismatch) {
				stopErr = err
			}
			waitGuardian(ctx, cur, grace+3*time.Second)
		}
	}
	final, _ := h.settleCommand(ctx, cur)
	if final == nil {
		final = cur
	}
	if final.CgroupPath != "" && final.Terminal() {
		if err := cgroup.Open(final.CgroupPath).Remove(); err != nil {
			cleanup = append(cleanup, err.Error())
		} else {
			h.releaseIntents(ctx, final.EnvID, final.ID, "cgroup")
		}
	}
	if len(cleanup) > 0 {
		n := *final
		n.CleanupErrors = append(n.CleanupErrors, cleanup...)
		if err := h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.UpdateCommand(&n) }); err == nil {
			final = &n
		}
	}
	if !final.Terminal() {
		if stopErr == nil {
			stopErr = ErrStopIncomplete
		}
		return final, fmt.Errorf("stopping %s: tree is %s: %w", final.ID, final.TreeState, stopErr)
	}
	return final, nil
}

// waitGuardian waits (bounded) for the guardian to finish its receipt.
func waitGuardian(ctx context.Context, c *registry.Command, limit time.Duration) {
	if c.Guardian == nil {
		return
	}
	p, err := linux.OpenVerified(linuxIdentity(c.Guardian))
	if err != nil {
		return
	}
	defer p.Close()
	fds := []unix.PollFd{{Fd: int32(p.Fd()), Events: unix.POLLIN}}
	end := time.Now().Add(limit)
	for time.Now().Before(end) && ctx.Err() == nil {
		n, _ := unix.Poll(fds, 50)
		if n > 0 {
			return
		}
	}
}

// stopCgroupTree is the cgroup2 stop protocol for one workload group.
func stopCgroupTree(ctx context.Context, path string, grace time.Duration) error {
	g := cgroup.Open(path)
	ev, err := g.Events()
	if errors.Is(err, os.ErrNotExist) || (err == nil && !ev.Populated) {
		return nil
	}
	if err != nil {
		return err
	}
	if grace > 0 {
		signalMembers(g, syscall.SIGTERM)
		gctx, cancel := context.WithTimeout(ctx, grace)
		err := g.WaitEmpty(gctx)
		cancel()
		if err == nil {
			return nil
		}
	}
	// Freeze, so nothing forks between listing and killing, then check that
	// membership is stable.
	froze := g.SetFrozen(true) == nil
	if froze {
		fctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, _ = g.WaitEvent(fctx, func(e cgroup.Events) bool { return e.Frozen || !e.Populated })
		cancel()
		a, _ := g.AllProcs()
		b, _ := g.AllProcs()
		slices.Sort(a)
		slices.Sort(b)
		_ = slices.Equal(a, b) // cgroup.kill covers late members either way
	}
	killErr := g.Kill()
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	werr := g.WaitEmpty(kctx)
	cancel()
	if froze {
		// Thaw only what this stop froze (the group may be gone by now).
		_ = g.SetFrozen(false)
	}
	if killErr != nil && !errors.Is(killErr, os.ErrNotExist) {
		return killErr
	}
	if werr != nil {
		return fmt.Errorf("tree still populated after kill (%v): %w", werr, ErrStopIncomplete)
	}
	return nil
}

// signalMembers signals every process in the group's subtree through a
// pidfd opened while it was a member, re-checking membership after the
// open so a reused PID is never signalled.
func signalMembers(g *cgroup.Group, sig syscall.Signal) {
	pids, _ := g.AllProcs()
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if inCgroup(pid, g.Path) {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
}

// inCgroup reports whether pid is in the group at path or below it.
func inCgroup(pid int, path string) bool {
	m, err := cgroup.FindMount()
	if err != nil {
		return false
	}
	rel := strings.TrimPrefix(path, m.Path)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cur, ok := strings.CutPrefix(line, "0::"); ok {
			cur = strings.TrimSpace(cur)
			return cur == rel || strings.HasPrefix(cur, rel+"/")
		}
	}
	return false
}

func (h *Host) releaseIntents(ctx context.Context, envID, commandID, kind string) {
	ins, err := h.reg.Intents(ctx, envID, registry.IntentPending, registry.IntentCreated)
	if err != nil {
		return
	}
	_ = h.reg.Write(ctx, func(tx *registry.Tx) error {
		for _, in := range ins {
			if in.CommandID != commandID || in.Kind != kind {
				continue
			}
			if _, err := os.Stat(in.Target); err == nil {
				continue
			}
			state := registry.IntentReleased
			if in.State == registry.IntentPending {
				state = registry.IntentAbandoned
			}
			if err := tx.SettleIntent(in.ID, state, "", ""); err != nil {
				return err
			}
		}
		return nil
	})
}

// StopEnv stops every command of an environment, confirms their exit,
// removes the environment's empty cgroups and records the stop. It deletes
// no file: logs, receipts and trees stay.
func (h *Host) StopEnv(ctx context.Context, idPrefix string, opts StopOptions) (*registry.Env, error) {
	kind, id, err := h.reg.Resolve(ctx, idPrefix)
	if err != nil {
		return nil, err
	}
	if kind != "env" {
		return nil, fmt.Errorf("%s is a command (use StopCommand): %w", id, ErrNotFound)
	}
	return h.stopEnv(ctx, id, opts)
}

// Stop stops the environment (see Host.StopEnv).
func (e *Env) Stop(ctx context.Context, opts StopOptions) error {
	rec, err := e.h.stopEnv(ctx, e.rec.ID, opts)
	if rec != nil {
		e.mu.Lock()
		e.rec = rec
		e.mu.Unlock()
	}
	return err
}

func (h *Host) stopEnv(ctx context.Context, id string, opts StopOptions) (*registry.Env, error) {
	if opts.Reason == "" {
		opts.Reason = ReasonUser
	}
	env, err := h.reg.Env(ctx, id)
	if err != nil {
		return nil, err
	}
	if env.State == registry.EnvStopped || env.State == registry.EnvFailed {
		return env, nil
	}
	// Close admission: no new command is accepted once stopping.
	now := time.Now().UTC()
	for try := 0; try < 5; try++ {
		n := *env
		n.State = registry.EnvStopping
		if n.StopReason == "" {
			n.StopReason = opts.Reason
			n.StopRequestedAt = &now
		}
		err = h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.UpdateEnv(&n) })
		if err == nil {
			env = &n
			break
		}
		if !errors.Is(err, registry.ErrConflict) {
			break // recording failed: stop anyway
		}
		if env, err = h.reg.Env(ctx, id); err != nil {
			return nil, err
		}
	}
	cmds, err := h.reg.Commands(ctx, registry.CommandFilter{EnvID: id})
	if err != nil {
		return env, err
	}
	var errs []error
	reason := opts.Reason
	if env.StopReason != "" {
		reason = env.StopReason
	}
	type result struct {
		c   *registry.Command
		err error
	}
	results := make(chan result, len(cmds))
	pending := 0
	for _, c := range cmds {
		if c.Terminal() {
			continue
		}
		pending++
		go func(c *registry.Command) {
			r, err := h.stopCommand(ctx, env, c, StopOptions{Reason: reason, Grace: opts.Grace})
			results <- result{r, err}
		}(c)
	}
	for ; pending > 0; pending-- {
		if r := <-results; r.err != nil {
			errs = append(errs, r.err)
		}
	}
	var cleanup []string
	boot, _ := linux.BootID()
	otherBoot := env.BootID != boot
	if env.Keeper != nil && !otherBoot {
		// The view is released once its keeper and the commands that
		// joined it are gone. Trees stay.
		stopKeeper(ctx, env.Keeper)
	}
	if env.Unit != "" && !otherBoot {
		if err := stopScope(ctx, env); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	if env.CgroupPath != "" {
		g := cgroup.Open(env.CgroupPath)
		if ev, err := g.Events(); err == nil && ev.Populated && !otherBoot {
			// Anything left (a command whose stop failed, a stray member)
			// is killed with the environment.
			_ = stopCgroupTree(ctx, env.CgroupPath, 0)
		}
		if err := g.Remove(); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	if lg := limitGroup(env); lg != nil {
		if ev, err := json.Marshal(lg.Evidence()); err == nil {
			env.LimitEvidence = ev
		}
		if err := lg.Remove(ctx); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	fault.Point(fault.Finalize)
	stopped := time.Now().UTC()
	var final *registry.Env
	for try := 0; try < 5; try++ {
		cur, err := h.reg.Env(ctx, id)
		if err != nil {
			break
		}
		n := *cur
		if len(errs) == 0 {
			n.State = registry.EnvStopped
			n.StoppedAt = &stopped
		}
		n.CleanupErrors = append(n.CleanupErrors, cleanup...)
		if env.LimitEvidence != nil {
			n.LimitEvidence = env.LimitEvidence
		}
		if env.ManagerResult != "" {
			n.ManagerResult = env.ManagerResult
		}
		err = h.reg.Write(ctx, func(tx *registry.Tx) error {
			if err := tx.UpdateEnv(&n); err != nil {
				return err
			}
			if err := settleEnvIntentsKind(tx, h, id, "cgroup-v1"); err != nil {
				return err
			}
			if n.ManagerResult != "" {
				// The manager stopped the scope: its intent is released.
				if err := settleEnvIntentsKind(tx, h, id, "scope"); err != nil {
					return err
				}
			}
			return settleEnvIntentsKind(tx, h, id, "cgroup")
		})
		if err == nil {
			final = &n
			break
		}
		if !errors.Is(err, registry.ErrConflict) {
			errs = append(errs, fmt.Errorf("recording the stop: %w", err))
			break
		}
	}
	h.writeManifest(ctx, id)
	if final == nil {
		final = env
	}
	return final, errors.Join(errs...)
}

func settleEnvIntentsKind(tx *registry.Tx, h *Host, envID, kind string) error {
	ins, err := h.reg.Intents(context.Background(), envID, registry.IntentPending, registry.IntentCreated)
	if err != nil {
		return err
	}
	for _, in := range ins {
		if in.Kind != kind {
			continue
		}
		if _, err := os.Stat(in.Target); err == nil {
			continue
		}
		state := registry.IntentReleased
		if in.State == registry.IntentPending {
			state = registry.IntentAbandoned
		}
		if err := tx.SettleIntent(in.ID, state, "", ""); err != nil {
			return err
		}
	}
	return nil
}

// stopKeeper ends a keeper: SIGTERM through a verified pidfd, a bounded
// wait, then SIGKILL.
func stopKeeper(ctx context.Context, id *registry.Identity) {
	p, err := linux.OpenVerified(linuxIdentity(id))
	if err != nil {
		return
	}
	defer p.Close()
	_ = p.Signal(syscall.SIGTERM)
	fds := []unix.PollFd{{Fd: int32(p.Fd()), Events: unix.POLLIN}}
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) && ctx.Err() == nil {
		if n, _ := unix.Poll(fds, 50); n > 0 {
			return
		}
	}
	_ = p.Signal(syscall.SIGKILL)
}

// guardianMatchesReceipt checks the recorded guardian against the receipt
// the guardian itself wrote through its registered proof file.
func guardianMatchesReceipt(c *registry.Command) error {
	if c.ProofIno == 0 {
		return errors.New("no receipt was registered")
	}
	r, err := supervise.ReadReceipt(filepath.Join(c.Dir, "receipt"), c.ID, c.ProofDev, c.ProofIno)
	if err != nil {
		return fmt.Errorf("its receipt can't vouch for it: %w", err)
	}
	if r.Guardian != c.Guardian.PID || r.BootID != c.Guardian.BootID {
		return fmt.Errorf("the record names pid %d but the guardian's receipt names pid %d", c.Guardian.PID, r.Guardian)
	}
	return nil
}
