package hostfork

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/view"
)

// Env is a live handle on an environment.
type Env struct {
	h  *Host
	mu sync.Mutex
	// rec is the last record this handle wrote or read.
	rec *registry.Env
	// keeper is set in the process that created the environment: it holds
	// the keeper's owner channel until this process exits.
	keeper *view.Keeper
}

// Create allocates the environment described by p: its record, its run
// directory and (cgroup2 tier) its cgroup. Every OS mutation is preceded by
// an intent in the ledger and followed by the resulting identity.
func (h *Host) Create(ctx context.Context, p *Plan) (*Env, error) {
	if len(p.Unsupported) > 0 {
		return nil, fmt.Errorf("the plan can't run on this host: %s: %w", strings.Join(p.Unsupported, "; "), ErrCapability)
	}
	boot, err := linux.BootID()
	if err != nil {
		return nil, err
	}
	self, _ := linux.IdentityOf(os.Getpid())
	id := newID()
	rec := &registry.Env{
		ID:           id,
		State:        registry.EnvCreating,
		CreatedAt:    time.Now().UTC(),
		BootID:       boot,
		Purpose:      p.Spec.Purpose,
		Labels:       p.Spec.Labels,
		Tier:         p.Tier,
		RunDir:       filepath.Join(h.root, "runs", id),
		OwnerExit:    p.OwnerExit,
		Owner:        regIdentity(self),
		UntilStopped: p.UntilStopped,
		TTL:          p.MaxRuntime,
		Grace:        p.Grace,
		IdleTimeout:  time.Duration(p.Spec.Lifetime.IdleTimeout),
	}
	if b, err := json.Marshal(p.Spec); err == nil {
		rec.Spec = b
	}
	if p.Tier == TierCgroup2 {
		rec.CgroupPath = filepath.Join(p.CgroupParent, id)
	}
	var dirIntent, cgIntent, scopeIntent int64
	err = h.reg.Write(ctx, func(tx *registry.Tx) error {
		if err := tx.InsertEnv(rec); err != nil {
			return err
		}
		var err error
		if dirIntent, err = tx.AddIntent(id, "", "dir", rec.RunDir); err != nil {
			return err
		}
		if rec.CgroupPath != "" {
			cgIntent, err = tx.AddIntent(id, "", "cgroup", rec.CgroupPath)
		}
		if err == nil && p.Tier == TierSystemdScope {
			scopeIntent, err = tx.AddIntent(id, "", "scope", "systemd:hostfork-"+id+".scope")
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("recording the new environment: %w", err)
	}
	fault.Point(fault.CreateRecorded)
	fail := func(cause error) (*Env, error) {
		h.abandonEnv(rec, cause)
		return nil, cause
	}
	// Exclusive creation: an existing directory is never adopted.
	if err := os.Mkdir(rec.RunDir, 0o700); err != nil {
		return fail(fmt.Errorf("creating run directory: %w", err))
	}
	if err := os.Mkdir(filepath.Join(rec.RunDir, "commands"), 0o700); err != nil {
		return fail(fmt.Errorf("creating run directory: %w", err))
	}
	var cgIno uint64
	if rec.CgroupPath != "" {
		g, err := cgroup.Create(rec.CgroupPath)
		if err != nil {
			return fail(fmt.Errorf("creating the environment's cgroup: %w", err))
		}
		if _, err := cgroup.Create(filepath.Join(rec.CgroupPath, "commands")); err != nil {
			return fail(fmt.Errorf("creating the environment's cgroup: %w", err))
		}
		cgIno, _ = g.Inode()
		fault.Point(fault.CreateCgroup)
	}
	scope := p.Tier == TierSystemdScope
	var lg *limits.Group
	makeLimits := func() error {
		if p.Spec.Limits.Empty() {
			return nil
		}
		g, err := h.createLimits(ctx, rec, p)
		if err != nil {
			return err
		}
		lg = g
		if b, err := json.Marshal(g); err == nil {
			rec.Limits = b
		}
		return nil
	}
	if !scope {
		if err := makeLimits(); err != nil {
			return fail(err)
		}
	}
	var keeper *view.Keeper
	if scope {
		// The scope's anchor is the keeper, with or without a view.
		var ops []view.Op
		if p.View != nil {
			trees, err := h.allocateTrees(ctx, rec, p)
			rec.Trees = trees
			if err != nil {
				return fail(err)
			}
			if ops, err = viewOps(p, trees); err != nil {
				return fail(err)
			}
			if b, err := json.Marshal(p.View); err == nil {
				rec.View = b
			}
		}
		klog, err := os.OpenFile(filepath.Join(rec.RunDir, "keeper.log"), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fail(fmt.Errorf("creating keeper log: %w", err))
		}
		rec.ActivatedMono = linux.MonotonicNow()
		keeper, err = h.createScope(ctx, rec, p, ops, klog)
		klog.Close()
		if keeper != nil {
			rec.Keeper = regIdentity(keeper.ID)
		}
		if err != nil {
			return fail(err)
		}
		if err := makeLimits(); err != nil {
			return fail(err)
		}
		if lg != nil {
			if err := lg.Join(keeper.ID.PID); err != nil {
				return fail(err)
			}
		}
		fault.Point(fault.KeeperStarted)
	}
	if p.View != nil && !scope {
		trees, err := h.allocateTrees(ctx, rec, p)
		rec.Trees = trees
		if err != nil {
			return fail(err)
		}
		ops, err := viewOps(p, trees)
		if err != nil {
			return fail(err)
		}
		kcg := ""
		if rec.CgroupPath != "" {
			kcg = filepath.Join(rec.CgroupPath, "keeper")
			if _, err := cgroup.Create(kcg); err != nil {
				return fail(fmt.Errorf("creating the keeper's cgroup: %w", err))
			}
		}
		klog, err := os.OpenFile(filepath.Join(rec.RunDir, "keeper.log"), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fail(fmt.Errorf("creating keeper log: %w", err))
		}
		// Activation happens before the view is built: setup after
		// activation counts against the deadline (DESIGN.md, Deadline).
		rec.ActivatedMono = linux.MonotonicNow()
		kc := &view.KeeperConfig{EnvID: id, Ops: ops, OwnerExit: p.OwnerExit, Grace: p.Grace}
		if rec.CgroupPath != "" {
			kc.CommandsCgroup = filepath.Join(rec.CgroupPath, "commands")
		}
		if p.MaxRuntime > 0 {
			kc.DeadlineMono = rec.ActivatedMono + p.MaxRuntime
		}
		keeper, err = view.StartKeeper(h.opts.Exe, kcg, klog, kc)
		klog.Close()
		if err != nil {
			return fail(err)
		}
		rec.Keeper = regIdentity(keeper.ID)
		if lg != nil {
			// The keeper counts against the budget (v1: join by PID).
			if err := lg.Join(keeper.ID.PID); err != nil {
				return fail(err)
			}
		}
		fault.Point(fault.KeeperStarted)
		if b, err := json.Marshal(p.View); err == nil {
			rec.View = b
		}
	}
	// Activation: the deadline runs from here (DESIGN.md, Deadline).
	if rec.ActivatedMono == 0 {
		rec.ActivatedMono = linux.MonotonicNow()
	}
	if rec.TTL > 0 {
		rec.DeadlineMono = rec.ActivatedMono + rec.TTL
		at := time.Now().Add(rec.TTL).UTC()
		rec.DeadlineAt = &at
	}
	rec.State = registry.EnvActive
	if !scope {
		rec.CgroupInode = cgIno
	}
	err = h.reg.Write(ctx, func(tx *registry.Tx) error {
		if err := tx.SettleIntent(dirIntent, registry.IntentCreated, identityJSON(rec.RunDir), ""); err != nil {
			return err
		}
		if cgIntent != 0 {
			if err := tx.SettleIntent(cgIntent, registry.IntentCreated, fmt.Sprintf(`{"inode":%d}`, cgIno), ""); err != nil {
				return err
			}
		}
		if scopeIntent != 0 {
			if err := tx.SettleIntent(scopeIntent, registry.IntentCreated, fmt.Sprintf(`{"unit":%q,"cgroup":%q,"membership":%q}`, rec.Unit, rec.CgroupPath, rec.ScopeMembership), ""); err != nil {
				return err
			}
		}
		return tx.UpdateEnv(rec)
	})
	if err != nil {
		return fail(fmt.Errorf("recording the environment's resources: %w", err))
	}
	if keeper != nil {
		commands := ""
		if rec.CgroupPath != "" {
			commands = filepath.Join(rec.CgroupPath, "commands")
		}
		if err := keeper.Commit(commands); err != nil {
			return fail(fmt.Errorf("confirming the keeper: %w", err))
		}
	}
	e := &Env{h: h, rec: rec, keeper: keeper}
	h.writeManifest(ctx, id)
	return e, nil
}

// abandonEnv undoes a failed creation: it removes what was made (only the
// exact recorded targets) and records the outcome. Errors are recorded,
// never hidden.
func (h *Host) abandonEnv(rec *registry.Env, cause error) {
	ctx := context.Background()
	var cleanup []string
	if rec.Keeper != nil {
		_ = linux.SignalVerified(linuxIdentity(rec.Keeper), syscall.SIGKILL)
	}
	if rec.Unit != "" {
		if err := stopScope(ctx, rec); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	if rec.CgroupPath != "" {
		g := cgroup.Open(rec.CgroupPath)
		_ = g.Kill()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = g.WaitEmpty(wctx)
		cancel()
		if err := g.Remove(); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	if g := limitGroup(rec); g != nil {
		if err := g.Remove(ctx); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	cleanup = append(cleanup, h.removeTrees(ctx, rec.Trees)...)
	// The run directory stays: its logs (keeper.log) are the evidence of
	// the failure; retention removes it like any other evidence.
	_ = h.reg.Write(ctx, func(tx *registry.Tx) error {
		cur, err := tx.Env(rec.ID)
		if err != nil {
			return err
		}
		cur.State = registry.EnvFailed
		cur.Error = cause.Error()
		cur.Trees = rec.Trees
		cur.Keeper = rec.Keeper
		cur.Limits = rec.Limits
		cur.Unit, cur.ScopeMembership, cur.ManagerResult = rec.Unit, rec.ScopeMembership, rec.ManagerResult
		cur.CgroupPath = rec.CgroupPath
		cur.CleanupErrors = append(cur.CleanupErrors, cleanup...)
		now := time.Now().UTC()
		cur.StoppedAt = &now
		if err := tx.UpdateEnv(cur); err != nil {
			return err
		}
		return settleEnvIntents(tx, h, rec.ID, len(cleanup) == 0)
	})
}

// settleEnvIntents marks the env's intents released (or abandoned when the
// target does not exist), checking each exact target.
func settleEnvIntents(tx *registry.Tx, h *Host, envID string, removed bool) error {
	ins, err := h.reg.Intents(context.Background(), envID, registry.IntentPending, registry.IntentCreated)
	if err != nil {
		return err
	}
	for _, in := range ins {
		if _, err := os.Stat(in.Target); err == nil {
			// Still there: stays on the ledger. A kept directory (the run
			// directory, evidence) is recorded with its identity.
			if in.Kind == "dir" && in.State == registry.IntentPending {
				if err := tx.SettleIntent(in.ID, registry.IntentCreated, identityJSON(in.Target), ""); err != nil {
					return err
				}
			}
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

func identityJSON(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	b, _ := json.Marshal(map[string]any{"path": path, "inode": inodeOf(st)})
	return string(b)
}

func regIdentity(id linux.Identity) *registry.Identity {
	if !id.Valid() {
		return nil
	}
	return &registry.Identity{BootID: id.BootID, PID: id.PID, StartTime: id.StartTime}
}

func linuxIdentity(id *registry.Identity) linux.Identity {
	if id == nil {
		return linux.Identity{}
	}
	return linux.Identity{BootID: id.BootID, PID: id.PID, StartTime: id.StartTime}
}

// ID is the environment's id.
func (e *Env) ID() string { return e.rec.ID }

// Record returns a copy of the environment's last known record.
func (e *Env) Record() registry.Env {
	e.mu.Lock()
	defer e.mu.Unlock()
	return *e.rec
}

// OpenEnv returns a management handle on an existing environment (by id or
// unique prefix). It restores management access, not another process's
// wait handles or pipes.
func (h *Host) OpenEnv(ctx context.Context, idPrefix string) (*Env, error) {
	kind, id, err := h.reg.Resolve(ctx, idPrefix)
	if err != nil {
		return nil, err
	}
	if kind != "env" {
		return nil, fmt.Errorf("%s is a command, not an environment: %w", id, ErrNotFound)
	}
	rec, err := h.reg.Env(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Env{h: h, rec: rec}, nil
}
