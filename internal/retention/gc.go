package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/decide"
	"github.com/habemus-papadum/hostfork/internal/export"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/store"
	"github.com/habemus-papadum/hostfork/spec"
)

// GCOptions select what a gc pass may delete.
type GCOptions struct {
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// RetainTrees / RetainEvidence override the configured and
	// per-environment retention for this call.
	RetainTrees, RetainEvidence *time.Duration
	// Force lists environments (ids or prefixes) whose trees and evidence
	// are discarded now, whatever their retention. Live environments are
	// still refused.
	Force []string
	// DeleteBranches also deletes the branch of each worktree tree it
	// removes (by default the branch, and so the work, stays).
	DeleteBranches bool
}

// RetentionFor resolves an environment's retention: per call, then the
// environment's own spec, then the store configuration.
func RetentionFor(env *api.Env, cfg *store.Config, opts GCOptions) (trees, evidence time.Duration) {
	trees, evidence = time.Duration(*cfg.Retention.Trees), time.Duration(*cfg.Retention.Evidence)
	var s spec.Environment
	if len(env.Spec) > 0 && json.Unmarshal(env.Spec, &s) == nil {
		if s.Retention.Trees != nil {
			trees = time.Duration(*s.Retention.Trees)
		}
		if s.Retention.Evidence != nil {
			evidence = time.Duration(*s.Retention.Evidence)
		}
	}
	if opts.RetainTrees != nil {
		trees = *opts.RetainTrees
	}
	if opts.RetainEvidence != nil {
		evidence = *opts.RetainEvidence
	}
	return trees, evidence
}

// Collector applies retention to one store.
type Collector struct {
	root string
	reg  *records.Records
}

// New is the collector of the store at root.
func New(root string, reg *records.Records) *Collector {
	return &Collector{root: root, reg: reg}
}

// GC applies retention to stopped environments: private trees first, then
// evidence (records, logs, receipts, manifests, exports) once no tree of
// the environment remains. The decisions are pure (decide.Retention) over
// facts gathered under the environment's lock; every deletion checks
// containment in the store's own directories and the recorded identity
// first, whatever the registry says. Borrowed baselines are never deleted.
func (e *Collector) GC(ctx context.Context, opts GCOptions) (*api.GCReport, error) {
	cfg, err := store.ReadConfig(e.root)
	if err != nil {
		return nil, err
	}
	rep := &api.GCReport{DryRun: opts.DryRun, Deleted: []api.GCItem{}, Held: []api.GCItem{}, Errors: []api.GCItem{},
		Note: "Btrfs reclaims deleted snapshots in the background: deleted means acknowledged, not reclaimed"}
	forced := map[string]bool{}
	for _, f := range opts.Force {
		kind, id, err := e.reg.Resolve(ctx, f)
		if err != nil {
			return nil, err
		}
		if kind != "env" {
			return nil, fmt.Errorf("--force %s: that is a command; give its environment: %w", f, api.ErrInvalid)
		}
		env, err := e.reg.Env(ctx, id)
		if err != nil {
			return nil, err
		}
		if !env.State.Final() {
			return nil, fmt.Errorf("--force %s: the environment is %s; stop it first ('hostfork stop %s'): %w", id, env.State, id, api.ErrInvalid)
		}
		forced[id] = true
	}
	envs, err := e.reg.Envs(ctx, registry.EnvQuery{States: []api.EnvState{api.EnvStopped, api.EnvFailed}})
	if err != nil {
		return nil, err
	}
	all, err := e.reg.Envs(ctx, registry.EnvQuery{})
	if err != nil {
		return nil, err
	}
	for _, env := range envs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		e.gcEnv(ctx, env, all, cfg, opts, forced[env.ID], rep)
	}
	if !opts.DryRun && len(rep.Deleted) > 0 {
		var b registry.Batch
		for _, it := range rep.Deleted {
			b.Event(api.Event{Kind: api.EventGC, Env: it.Env, Detail: it.What + ": " + it.Reason})
		}
		_ = e.reg.Commit(ctx, &b)
		_ = e.reg.Checkpoint(ctx)
	}
	return rep, nil
}

func (e *Collector) gcEnv(ctx context.Context, env *api.Env, all []*api.Env, cfg *store.Config, opts GCOptions, force bool, rep *api.GCReport) {
	unlock, err := records.EnvLock(env.RunDir, 5*time.Second)
	if err != nil {
		rep.Held = append(rep.Held, api.GCItem{Env: env.ID, What: "environment", Reason: records.LockReason(err, "another reaper, gc or stop holds it")})
		return
	}
	defer unlock()
	env, err = e.reg.Env(ctx, env.ID) // re-check under the lock
	if err != nil || !env.State.Final() {
		return
	}
	f := decide.RetentionFacts{Now: time.Now(), StoppedAt: env.StoppedAt, Force: force}
	f.KeepTrees, f.KeepEvidence = RetentionFor(env, cfg, opts)
	// Every command must be proven finished: live or unverified owners
	// keep their evidence.
	cmds, _ := e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
	for _, c := range cmds {
		if !c.Final() {
			f.Unfinished = "command " + c.ID + " is " + string(decide.LivenessOf(c)) + "; run 'hostfork reap'"
		}
	}
	byName := map[string]*api.Tree{}
	for i := range env.Trees {
		t := &env.Trees[i]
		if t.State != api.TreeAllocated {
			continue
		}
		byName[t.Name] = t
		hold := e.treeHold(env, t, all)
		if hold == "" && !force {
			hold = worktreeHold(ctx, env.ID, t)
		}
		f.Trees = append(f.Trees, decide.TreeFacts{Name: t.Name, Hold: hold})
	}
	changed := false
	// A held worktree is said in the environment's events too: its record
	// says why it is still there.
	var held []api.Event
	defer func() {
		if len(held) > 0 {
			var b registry.Batch
			for _, ev := range held {
				b.Event(ev)
			}
			_ = e.reg.Commit(context.WithoutCancel(ctx), &b)
		}
	}()
	for _, it := range decide.Retention(f) {
		item := api.GCItem{Env: env.ID, What: it.What, Reason: it.Reason}
		switch {
		case !it.Delete:
			rep.Held = append(rep.Held, item)
			if it.Tree != "" && byName[it.Tree].Kind == spec.KindWorktree && !opts.DryRun {
				held = append(held, api.Event{Kind: api.EventGC, Env: env.ID, Detail: "held " + it.What + ": " + it.Reason})
			}
		case it.Tree != "":
			t := byName[it.Tree]
			item.Path = t.HostPath
			if opts.DryRun {
				rep.Deleted = append(rep.Deleted, item)
				continue
			}
			if err := removeTree(ctx, e.root, env.ID, t, force, opts.DeleteBranches); err != nil {
				item.Reason = err.Error()
				rep.Errors = append(rep.Errors, item)
				continue
			}
			t.State = api.TreeRemoved
			changed = true
			rep.Deleted = append(rep.Deleted, item)
		default: // evidence
			item.Path, item.Bytes = env.RunDir, DirBytes(env.RunDir)
			if left := allocatedTrees(env); left != "" && !opts.DryRun {
				// The record is what names the tree for a later gc (or
				// a person): it goes only with the last tree.
				item.Reason = "tree " + left + " is still allocated (held, or its removal failed); the record and its evidence stay"
				rep.Held = append(rep.Held, item)
				continue
			}
			if changed && !e.recordTrees(ctx, env, rep) {
				return
			}
			changed = false
			if opts.DryRun {
				rep.Deleted = append(rep.Deleted, item)
				continue
			}
			if err := e.removeEvidence(ctx, env); err != nil {
				item.Reason = err.Error()
				rep.Errors = append(rep.Errors, item)
				continue
			}
			var b registry.Batch
			ins, _ := e.reg.Intents(ctx, registry.IntentFilter{EnvID: env.ID, Open: true})
			records.SettleAll(&b, records.Ptrs(ins), nil)
			b.DeleteEnv(env.ID)
			if err := e.reg.Commit(ctx, &b); err != nil {
				item.Reason = "files deleted, record kept: " + err.Error()
				rep.Errors = append(rep.Errors, item)
				continue
			}
			rep.Deleted = append(rep.Deleted, item)
		}
	}
	if changed {
		e.recordTrees(ctx, env, rep)
	}
}

// allocatedTrees names the first tree of env that is still allocated
// ("" none).
func allocatedTrees(env *api.Env) string {
	for _, t := range env.Trees {
		if t.State == api.TreeAllocated {
			return t.Name
		}
	}
	return ""
}

// recordTrees records deleted trees (and settles their intents).
func (e *Collector) recordTrees(ctx context.Context, env *api.Env, rep *api.GCReport) bool {
	for try := 0; try < 5; try++ {
		cur, err := e.reg.Env(ctx, env.ID)
		if err != nil {
			break
		}
		n := *cur
		n.Trees = env.Trees
		var b registry.Batch
		b.UpdateEnv(cur, &n)
		ins, _ := e.reg.Intents(ctx, registry.IntentFilter{EnvID: env.ID, Kind: registry.KindTree, Open: true})
		records.SettleAll(&b, records.Ptrs(ins), nil)
		err = e.reg.Commit(ctx, &b)
		if err == nil {
			e.reg.WriteManifest(ctx, env.ID)
			return true
		}
		if !errors.Is(err, registry.ErrConflict) {
			rep.Errors = append(rep.Errors, api.GCItem{Env: env.ID, What: "record", Reason: "trees were deleted but the record could not be updated: " + err.Error()})
			return false
		}
	}
	return false
}

// UndoTree removes a tree of a creation that failed: nothing ran in it,
// so a worktree goes with its branch (nothing half-made is left).
func UndoTree(ctx context.Context, root, envID string, t *api.Tree) error {
	return removeTree(ctx, root, envID, t, true, true)
}

// worktreeHold says why a worktree tree must stay ("" it may go): it has
// uncommitted changes, or they can't be known.
func worktreeHold(ctx context.Context, envID string, t *api.Tree) string {
	if t.Kind != spec.KindWorktree {
		return ""
	}
	var st storage.Tree
	if err := json.Unmarshal(t.Storage, &st); err != nil {
		return "unreadable tree record: " + err.Error()
	}
	dirty, err := storage.Worktree{}.Dirty(ctx, st)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return ""
	case err != nil:
		return "can't tell whether the worktree has uncommitted changes (" + err.Error() + "); 'hostfork gc --force " + envID + "' removes it anyway"
	case dirty != "":
		return "worktree on branch " + st.Worktree.Branch + " has " + dirty + "; commit them ('hostfork export " + envID + " " + t.Name + " --commit MSG') or discard them ('hostfork gc --force " + envID + "')"
	}
	return ""
}

// removeTree deletes one allocated tree of environment envID through its
// storage backend, which checks the recorded identities first. Whatever
// the record says, only an exact allocation destination of that
// environment is removed (<root>/trees/<env>-<tree>, or <env>-<tree> in an
// allocation area), with the tree's data inside it. A worktree is removed
// also when dirty with force, and its branch deleted with deleteBranch.
func removeTree(ctx context.Context, root, envID string, t *api.Tree, force, deleteBranch bool) error {
	var st storage.Tree
	if err := json.Unmarshal(t.Storage, &st); err != nil {
		return fmt.Errorf("unreadable tree record: %w", err)
	}
	if !records.IsAllocationDest(root, envID, st.Dest) || !safefs.Within(st.Dest, st.Path) {
		return fmt.Errorf("the record names %s (data %s), which is not an allocation of environment %s: refusing to delete it: %w", st.Dest, st.Path, envID, safefs.ErrIdentityMismatch)
	}
	b, err := storage.ForKind(st.Kind)
	if err != nil {
		return err
	}
	fault.Point(fault.GCDelete)
	if w, ok := b.(storage.Worktree); ok {
		return w.RemoveWorktree(ctx, st, force, deleteBranch)
	}
	return b.Remove(ctx, st)
}

// removeEvidence deletes an environment's run directory — only if it is
// <store>/runs/<id> and still the directory recorded when it was made
// (device and inode), walked by descriptors without following a symlink.
func (e *Collector) removeEvidence(ctx context.Context, env *api.Env) error {
	want := filepath.Join(e.root, "runs", env.ID)
	if filepath.Clean(env.RunDir) != want {
		return fmt.Errorf("the record names run directory %s, which is not %s: refusing to delete it: %w", env.RunDir, want, safefs.ErrIdentityMismatch)
	}
	ins, err := e.reg.Intents(ctx, registry.IntentFilter{EnvID: env.ID, Kind: registry.KindDir})
	if err != nil {
		return err
	}
	var id safefs.FileID
	for _, in := range ins {
		if in.CommandID == "" && in.Target == want {
			if dev, ino, ok := records.RecordedInode(in.Identity); ok {
				id = safefs.FileID{Dev: dev, Ino: ino}
			}
		}
	}
	runs, err := safefs.OpenDir(filepath.Join(e.root, "runs"))
	if err != nil {
		return err
	}
	defer runs.Close()
	if _, err := runs.Lstat(env.ID); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if id.Ino == 0 {
		return fmt.Errorf("no identity was recorded for %s: refusing to delete it (remove it by hand if it is yours): %w", want, safefs.ErrIdentityMismatch)
	}
	if id.Dev == 0 {
		st, err := runs.Stat()
		if err != nil {
			return err
		}
		id.Dev = st.Dev
	}
	return runs.RemoveTree(env.ID, id)
}

// RemoveUnrecordedTree removes the destination of a tree whose identity
// was never recorded (its preparation was interrupted) when it is exactly
// a destination hostfork allocates, and returns the fact to settle its
// intent with. A path it can't vouch for, or can't remove, is reported in
// cleanup and its intent stays pending (ok false).
func RemoveUnrecordedTree(ctx context.Context, root string, in registry.Intent, cleanup *[]string) (registry.Fact, bool) {
	if _, err := os.Lstat(in.Target); errors.Is(err, os.ErrNotExist) {
		return registry.Fact{Exists: false}, true
	}
	if !records.IsAllocationDest(root, in.EnvID, in.Target) {
		*cleanup = append(*cleanup, "tree "+in.Target+": its identity was never recorded and the path is not one hostfork allocates; check it and remove it by hand")
		return registry.Fact{}, false
	}
	// A worktree allocation's branch (hostfork/ENV/TREE, provision.WorktreeBranch)
	// goes with it: nothing was ever committed on it.
	branch := "hostfork/" + in.EnvID + "/" + strings.TrimPrefix(filepath.Base(in.Target), in.EnvID+"-")
	if err := storage.RemoveUnrecorded(ctx, in.Target, branch); err != nil {
		*cleanup = append(*cleanup, "tree "+in.Target+": "+err.Error())
		return registry.Fact{}, false
	}
	return registry.Fact{Exists: false}, true
}

// treeHold says why a tree must be kept although its retention passed.
func (e *Collector) treeHold(env *api.Env, t *api.Tree, all []*api.Env) string {
	if export.InProgress(env.RunDir, t.Name) {
		return "an export of this tree has not finished"
	}
	for _, o := range all {
		if o.ID == env.ID {
			continue
		}
		for _, ot := range o.Trees {
			if ot.State == api.TreeAllocated && (ot.Source == t.HostPath || safefs.Within(t.HostPath, ot.Source)) {
				return "tree " + ot.Name + " of environment " + o.ID + " is built on it"
			}
		}
	}
	return ""
}

// DirBytes sums apparent file sizes below dir (0 if unreadable).
func DirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
