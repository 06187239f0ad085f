package hostfork

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/systemd"
)

// ReapAction is one thing a reap did.
type ReapAction struct {
	Env     string `json:"env"`
	Command string `json:"command,omitempty"`
	Action  string `json:"action"`
	Detail  string `json:"detail,omitempty"`
}

// ReapPending is something a reap could not settle, with the reason.
type ReapPending struct {
	Env    string `json:"env"`
	What   string `json:"what"`
	Reason string `json:"reason"`
}

// ReapReport is the outcome of one reap pass.
type ReapReport struct {
	Checked int           `json:"checked_envs"`
	Actions []ReapAction  `json:"actions"`
	Pending []ReapPending `json:"pending"`
}

// Reap reconciles what the ledger recorded with what exists and finishes
// interrupted work: it settles command records from receipts and kernel
// evidence, stops expired or orphaned environments, completes interrupted
// stops and creations, and settles intents that never produced a resource.
// It is idempotent and safe to run concurrently with itself and with live
// runs: each environment is handled under its own lock, every record change
// is a compare-and-set, and nothing a live or unverified owner might use is
// deleted. What it cannot settle is reported as pending, with the reason.
func (h *Host) Reap(ctx context.Context) (*ReapReport, error) {
	rep := &ReapReport{Actions: []ReapAction{}, Pending: []ReapPending{}}
	envs, err := h.reg.Envs(ctx, registry.EnvFilter{States: []string{registry.EnvCreating, registry.EnvActive, registry.EnvStopping}})
	if err != nil {
		return nil, err
	}
	for _, e := range envs {
		rep.Checked++
		if err := h.reapEnv(ctx, e, rep); err != nil {
			rep.Pending = append(rep.Pending, ReapPending{Env: e.ID, What: "environment", Reason: err.Error()})
		}
	}
	// Intents of finished environments that were never settled.
	if err := h.reapIntents(ctx, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// envLock serializes reapers (and gc) on one environment. It is taken
// without waiting: a busy environment is being handled by someone else.
// An environment whose run directory does not exist (a creation killed
// before its mkdir) is locked through the directory that holds the run
// directories instead, so that it can still be reaped and collected.
func envLock(runDir string) (func(), bool) {
	f, err := os.OpenFile(filepath.Join(runDir, "reap.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.Open(filepath.Dir(runDir))
	}
	if err != nil {
		return func() {}, true
	}
	// Another reaper's pass over one environment is short: wait a bounded
	// time; still busy after that is reported as pending.
	for end := time.Now().Add(5 * time.Second); ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, true
		}
		if (err != unix.EWOULDBLOCK && err != unix.EINTR) || time.Now().After(end) {
			f.Close()
			return nil, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *Host) reapEnv(ctx context.Context, e *registry.Env, rep *ReapReport) error {
	unlock, ok := envLock(e.RunDir)
	if !ok {
		rep.Pending = append(rep.Pending, ReapPending{Env: e.ID, What: "environment", Reason: "another reaper or stop holds it"})
		return nil
	}
	defer unlock()
	// Re-read under the lock: the decision must be based on current state.
	e, err := h.reg.Env(ctx, e.ID)
	if err != nil {
		return err
	}
	if e.State == registry.EnvStopped || e.State == registry.EnvFailed {
		return nil // another reaper or a stop finished it meanwhile
	}
	boot, _ := linux.BootID()
	owner := linux.Assess(linuxIdentity(e.Owner))
	otherBoot := e.BootID != boot
	switch e.State {
	case registry.EnvCreating:
		if owner == linux.Alive && !otherBoot {
			rep.Pending = append(rep.Pending, ReapPending{Env: e.ID, What: "creation", Reason: "its creator is still running"})
			return nil
		}
		if owner == linux.Unverified && !otherBoot {
			rep.Pending = append(rep.Pending, ReapPending{Env: e.ID, What: "creation", Reason: "its creator's liveness is unverified"})
			return nil
		}
		h.abandonInterrupted(ctx, e, rep)
		return nil
	case registry.EnvStopping:
		_, err := h.stopEnv(ctx, e.ID, StopOptions{Reason: e.StopReason})
		rep.Actions = append(rep.Actions, ReapAction{Env: e.ID, Action: "completed-stop", Detail: errText(err)})
		return err
	}
	// Active: settle commands first.
	cmds, err := h.reg.Commands(ctx, registry.CommandFilter{EnvID: e.ID})
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if c.Terminal() {
			continue
		}
		n, err := h.settleCommand(ctx, c)
		if err == nil && n != nil && n.Rev != c.Rev {
			rep.Actions = append(rep.Actions, ReapAction{Env: e.ID, Command: c.ID, Action: "settled", Detail: "tree " + n.TreeState})
		}
		if n != nil && n.TreeState == registry.Unverified {
			rep.Pending = append(rep.Pending, ReapPending{Env: e.ID, What: "command " + c.ID, Reason: "its guardian's liveness and its tree's exit can't be verified; evidence and capacity are kept"})
		}
		// A stop of this command was decided (its reason is recorded) but
		// not carried out: its stopper died. Finish it, unless a stop is in
		// progress.
		if n != nil && !n.Terminal() && n.StopReason != "" && !otherBoot && stopIdle(n.Dir) {
			_, err := h.stopCommand(ctx, e, n, StopOptions{Reason: n.StopReason})
			rep.Actions = append(rep.Actions, ReapAction{Env: e.ID, Command: c.ID, Action: "completed-stop", Detail: errText(err)})
		}
	}
	reason := ""
	switch {
	case otherBoot:
		reason = ReasonDeadline
		if e.DeadlineMono == 0 {
			reason = "reboot"
		}
	case e.DeadlineMono > 0 && linux.MonotonicNow() >= e.DeadlineMono:
		reason = ReasonDeadline
	case e.OwnerExit == OwnerExitStop && owner == linux.Gone:
		reason = ReasonOwnerExit
	case e.Keeper != nil && linux.Assess(linuxIdentity(e.Keeper)) == linux.Gone:
		reason = "keeper-lost"
	}
	if reason == "" {
		return nil
	}
	_, err = h.stopEnv(ctx, e.ID, StopOptions{Reason: reason})
	rep.Actions = append(rep.Actions, ReapAction{Env: e.ID, Action: "stopped", Detail: reason + errSuffix(err)})
	return err
}

// stopIdle reports whether no stop of the command whose directory is dir
// is in progress (its stop lock is free).
func stopIdle(dir string) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one attempt, no waiting
	unlock, err := stopLock(ctx, dir)
	if err != nil {
		return false
	}
	unlock()
	return true
}

// OwnerExit policies, as recorded.
const (
	OwnerExitStop   = "stop"
	OwnerExitDetach = "detach"
)

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// abandonInterrupted finishes a creation whose creator died: whatever the
// ledger shows was made is killed and removed (exact targets only), and the
// environment is recorded as failed.
func (h *Host) abandonInterrupted(ctx context.Context, e *registry.Env, rep *ReapReport) {
	ins, _ := h.reg.Intents(ctx, e.ID, registry.IntentPending, registry.IntentCreated)
	for _, in := range ins {
		if in.Kind == "tree" && in.State == registry.IntentCreated {
			found := false
			for _, t := range e.Trees {
				if filepathHasPrefix(t.HostPath, in.Target) {
					found = true
				}
			}
			if !found {
				// The identity is only in the intent: rebuild the record.
				var st storage.Tree
				if json.Unmarshal([]byte(in.Identity), &st) == nil {
					raw, _ := json.Marshal(st)
					e.Trees = append(e.Trees, registry.TreeRecord{Name: filepath.Base(in.Target), Kind: string(st.Kind), HostPath: st.Path, Storage: raw, State: TreeAllocated})
				}
			}
		}
	}
	// A tree whose preparation was interrupted before its identity was
	// recorded is removed by reapIntents (its intent names it exactly).
	h.abandonEnv(e, errors.New("creation interrupted: its creator exited before the environment was active"))
	rep.Actions = append(rep.Actions, ReapAction{Env: e.ID, Action: "abandoned-creation"})
}

func filepathHasPrefix(p, dir string) bool {
	return p == dir || len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/'
}

// reapIntents settles ledger entries of finished environments and of
// finished commands (also in environments that are still active): an
// intent whose target never appeared is abandoned; an empty cgroup (v2, or
// a v1 limit group) left behind is removed and released. What it can't
// settle is reported as pending on every pass. An environment with work to
// do is handled under its lock, with its intents read again there, so that
// concurrent reapers neither repeat nor race each other's settlements.
func (h *Host) reapIntents(ctx context.Context, rep *ReapReport) error {
	ins, err := h.reg.Intents(ctx, "", registry.IntentPending, registry.IntentCreated)
	if err != nil {
		return err
	}
	envState := map[string]string{}
	var todo []string
	for _, in := range ins {
		// Most entries of a store with many retained runs are evidence
		// that exists: settled without reading the environment's record.
		if slices.Contains(todo, in.EnvID) || retained(in) {
			continue
		}
		st, ok := envState[in.EnvID]
		if !ok {
			e, err := h.reg.Env(ctx, in.EnvID)
			if err != nil {
				continue
			}
			st = e.State
			envState[in.EnvID] = st
		}
		if h.intentDue(ctx, in, st) {
			todo = append(todo, in.EnvID)
		}
	}
	for _, id := range todo {
		e, err := h.reg.Env(ctx, id)
		if err != nil {
			continue
		}
		unlock, ok := envLock(e.RunDir)
		if !ok {
			rep.Pending = append(rep.Pending, ReapPending{Env: id, What: "environment", Reason: "another reaper or gc holds it"})
			continue
		}
		// Re-read under the lock: another reaper may have settled them.
		if e, err = h.reg.Env(ctx, id); err == nil {
			if ins, err := h.reg.Intents(ctx, id, registry.IntentPending, registry.IntentCreated); err == nil {
				for _, in := range ins {
					if h.intentDue(ctx, in, e.State) {
						h.reapIntent(ctx, in, rep)
					}
				}
			}
		}
		unlock()
	}
	return nil
}

// intentDue reports whether reapIntent has something to do with in: its
// owner (the command, else the environment, in state envState) is finished,
// and the intent is pending, names a cgroup, or names a target that is gone.
func (h *Host) intentDue(ctx context.Context, in registry.Intent, envState string) bool {
	if retained(in) {
		return false
	}
	envDone := envState == registry.EnvStopped || envState == registry.EnvFailed
	if in.CommandID != "" {
		// A finished command's resources are settled even while its
		// environment runs on (a failed launch, a detached command that
		// ended on its own).
		c, err := h.reg.Command(ctx, in.CommandID)
		if err != nil {
			return envDone
		}
		return c.Terminal()
	}
	return envDone
}

// retained reports a created resource that still exists and that no
// environment state settles (retained evidence or a tree): nothing to do.
func retained(in registry.Intent) bool {
	if in.State != registry.IntentCreated || in.Kind == "cgroup" || in.Kind == "cgroup-v1" || in.Kind == "scope" {
		return false
	}
	_, err := os.Stat(in.Target)
	return err == nil
}

// reapIntent settles one due intent, or reports why it can't.
func (h *Host) reapIntent(ctx context.Context, in registry.Intent, rep *ReapReport) {
	if in.Kind == "scope" {
		h.reapScopeIntent(ctx, in, rep)
		return
	}
	_, statErr := os.Stat(in.Target)
	missing := errors.Is(statErr, os.ErrNotExist)
	switch {
	case missing && in.State == registry.IntentPending:
		h.settleIntent(ctx, in.ID, registry.IntentAbandoned)
		rep.Actions = append(rep.Actions, ReapAction{Env: in.EnvID, Command: in.CommandID, Action: "intent-abandoned", Detail: in.Kind + " " + in.Target})
	case missing:
		h.settleIntent(ctx, in.ID, registry.IntentReleased)
		rep.Actions = append(rep.Actions, ReapAction{Env: in.EnvID, Command: in.CommandID, Action: "intent-released", Detail: in.Kind + " " + in.Target})
	case in.Kind == "cgroup":
		g := cgroup.Open(in.Target)
		if ev, err := g.Events(); err == nil && ev.Populated {
			rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "cgroup " + in.Target, Reason: "still has processes after its command or environment ended; run 'hostfork stop " + in.EnvID + "'"})
			return
		}
		if err := g.Remove(); err != nil {
			rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "cgroup " + in.Target, Reason: err.Error()})
			return
		}
		h.settleIntent(ctx, in.ID, registry.IntentReleased)
		rep.Actions = append(rep.Actions, ReapAction{Env: in.EnvID, Command: in.CommandID, Action: "cgroup-removed", Detail: in.Target})
	case in.Kind == "cgroup-v1":
		// A v1 limit group of a finished environment (for example one
		// whose creation was interrupted before its limits were
		// recorded on the environment).
		if procs, err := os.ReadFile(filepath.Join(in.Target, "cgroup.procs")); err == nil && len(bytes.TrimSpace(procs)) > 0 {
			rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "cgroup " + in.Target, Reason: "still has processes after its environment stopped"})
			return
		}
		if err := unix.Rmdir(in.Target); err != nil && err != unix.ENOENT {
			rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "cgroup " + in.Target, Reason: (&os.PathError{Op: "rmdir", Path: in.Target, Err: err}).Error()})
			return
		}
		h.settleIntent(ctx, in.ID, registry.IntentReleased)
		rep.Actions = append(rep.Actions, ReapAction{Env: in.EnvID, Command: in.CommandID, Action: "cgroup-removed", Detail: in.Target})
	case in.State == registry.IntentPending && in.Kind == "dir":
		// The directory exists: the creation got that far. It is
		// evidence, kept and now recorded.
		h.settleIntentIdentity(ctx, in.ID, identityJSON(in.Target))
		rep.Actions = append(rep.Actions, ReapAction{Env: in.EnvID, Command: in.CommandID, Action: "intent-recorded", Detail: in.Target})
	case in.State == registry.IntentPending && in.Kind == "tree":
		// Its identity was never recorded, but the intent names the exact
		// destination, which allocation creates exclusively and uniquely
		// (<env>-<tree> in an allocation area): that is identity enough.
		if !h.isAllocationDest(in.EnvID, in.Target) {
			rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "tree " + in.Target, Reason: "preparation was interrupted before its identity was recorded, and the path is not one hostfork allocates; check it and remove it by hand"})
			return
		}
		if err := storage.RemoveUnrecorded(ctx, in.Target); err != nil {
			rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "tree " + in.Target, Reason: "preparation was interrupted before its identity was recorded; removing it: " + err.Error()})
			return
		}
		h.settleIntent(ctx, in.ID, registry.IntentAbandoned)
		rep.Actions = append(rep.Actions, ReapAction{Env: in.EnvID, Action: "unrecorded-tree-removed", Detail: in.Target})
	case in.State == registry.IntentPending:
		rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: in.Kind + " " + in.Target, Reason: "it exists, but its identity was never recorded; check it and remove it by hand (hostfork never deletes what it can't identify)"})
	}
}

func (h *Host) settleIntent(ctx context.Context, id int64, state string) {
	_ = h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.SettleIntent(id, state, "", "") })
}

func (h *Host) settleIntentIdentity(ctx context.Context, id int64, identity string) {
	_ = h.reg.Write(ctx, func(tx *registry.Tx) error {
		return tx.SettleIntent(id, registry.IntentCreated, identity, "")
	})
}

var _ = fmt.Sprint
var _ = time.Now

// reapScopeIntent settles the intent of a systemd scope by asking the
// manager: a unit that is gone or ended is released; a running one is
// stopped (its environment is finished); an unreachable manager leaves it
// pending.
func (h *Host) reapScopeIntent(ctx context.Context, in registry.Intent, rep *ReapReport) {
	unit := strings.TrimPrefix(in.Target, "systemd:")
	c, err := systemd.Connect(ctx, systemdBus(), systemd.Options{})
	if err != nil {
		rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "scope " + unit, Reason: "no systemd manager answers: " + err.Error()})
		return
	}
	defer c.Close()
	st, err := c.State(ctx, unit)
	if err != nil {
		rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "scope " + unit, Reason: err.Error()})
		return
	}
	if !st.Gone() && !st.Ended() {
		if _, err := c.StopUnit(ctx, unit); err != nil {
			rep.Pending = append(rep.Pending, ReapPending{Env: in.EnvID, What: "scope " + unit, Reason: "stopping it: " + err.Error()})
			return
		}
		rep.Actions = append(rep.Actions, ReapAction{Env: in.EnvID, Action: "scope-stopped", Detail: unit})
	}
	state := registry.IntentReleased
	if in.State == registry.IntentPending && st.Gone() {
		state = registry.IntentAbandoned
	}
	h.settleIntent(ctx, in.ID, state)
	rep.Actions = append(rep.Actions, ReapAction{Env: in.EnvID, Action: "intent-" + state, Detail: "scope " + unit})
}

// isAllocationDest reports whether p is a tree destination hostfork
// allocates for envID: <root>/trees/<env>-<tree> or
// <dir>/.hostfork-trees/<env>-<tree> (see treeDest).
func (h *Host) isAllocationDest(envID, p string) bool {
	if filepath.Clean(p) != p || !strings.HasPrefix(filepath.Base(p), envID+"-") {
		return false
	}
	dir := filepath.Dir(p)
	return dir == filepath.Join(h.root, "trees") || filepath.Base(dir) == ".hostfork-trees"
}
