package hostfork

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/storage"
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
}

// GCItem is one deletion (done or planned) or one hold.
type GCItem struct {
	Env    string `json:"env"`
	What   string `json:"what"` // tree NAME | evidence
	Path   string `json:"path,omitempty"`
	Reason string `json:"reason"`
	Bytes  int64  `json:"apparent_bytes,omitempty"`
}

// GCReport is the outcome of a gc pass.
type GCReport struct {
	DryRun  bool     `json:"dry_run"`
	Deleted []GCItem `json:"deleted"`
	Held    []GCItem `json:"held"`
	Errors  []GCItem `json:"errors"`
	// Note: deleted Btrfs snapshots free their space in the background;
	// a deletion here is acknowledged, not measured as reclaimed.
	Note string `json:"note,omitempty"`
}

// retentionFor resolves an environment's retention: per call, then the
// environment's own spec, then the store configuration.
func (h *Host) retentionFor(e *registry.Env, cfg *Config, opts GCOptions) (trees, evidence time.Duration) {
	trees, evidence = time.Duration(*cfg.Retention.Trees), time.Duration(*cfg.Retention.Evidence)
	var s spec.Environment
	if len(e.Spec) > 0 && json.Unmarshal(e.Spec, &s) == nil {
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

// GC applies retention to stopped environments: private trees first, then
// evidence (records, logs, receipts, manifests, exports) once no tree of
// the environment remains. Each deletion re-checks state, ownership and age
// under the environment's lock first. Trees that an unfinished export or a
// dependent overlay still needs are held and reported. Borrowed baselines
// are never deleted.
func (h *Host) GC(ctx context.Context, opts GCOptions) (*GCReport, error) {
	cfg, err := h.Config()
	if err != nil {
		return nil, err
	}
	rep := &GCReport{DryRun: opts.DryRun, Deleted: []GCItem{}, Held: []GCItem{}, Errors: []GCItem{},
		Note: "Btrfs reclaims deleted snapshots in the background: deleted means acknowledged, not reclaimed"}
	forced := map[string]bool{}
	for _, f := range opts.Force {
		kind, id, err := h.reg.Resolve(ctx, f)
		if err != nil {
			return nil, err
		}
		if kind != "env" {
			return nil, fmt.Errorf("--force %s: that is a command; give its environment: %w", f, ErrInvalid)
		}
		e, err := h.reg.Env(ctx, id)
		if err != nil {
			return nil, err
		}
		if e.State != registry.EnvStopped && e.State != registry.EnvFailed {
			return nil, fmt.Errorf("--force %s: the environment is %s; stop it first ('hostfork stop %s'): %w", id, e.State, id, ErrInvalid)
		}
		forced[id] = true
	}
	envs, err := h.reg.Envs(ctx, registry.EnvFilter{States: []string{registry.EnvStopped, registry.EnvFailed}})
	if err != nil {
		return nil, err
	}
	// Trees other environments still build on: an overlay or copy whose
	// source lies inside another environment's tree.
	all, err := h.reg.Envs(ctx, registry.EnvFilter{})
	if err != nil {
		return nil, err
	}
	for _, e := range envs {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		h.gcEnv(ctx, e, all, cfg, opts, forced[e.ID], rep)
	}
	return rep, nil
}

func (h *Host) gcEnv(ctx context.Context, e *registry.Env, all []*registry.Env, cfg *Config, opts GCOptions, force bool, rep *GCReport) {
	unlock, ok := envLock(e.RunDir)
	if !ok {
		rep.Held = append(rep.Held, GCItem{Env: e.ID, What: "environment", Reason: "another reaper, gc or stop holds it"})
		return
	}
	defer unlock()
	e, err := h.reg.Env(ctx, e.ID) // re-check under the lock
	if err != nil || (e.State != registry.EnvStopped && e.State != registry.EnvFailed) {
		return
	}
	if e.StoppedAt == nil {
		rep.Held = append(rep.Held, GCItem{Env: e.ID, What: "environment", Reason: "no confirmed stop time recorded"})
		return
	}
	// Every command must be proven finished: live or unverified owners
	// keep their evidence.
	cmds, _ := h.reg.Commands(ctx, registry.CommandFilter{EnvID: e.ID})
	for _, c := range cmds {
		if !c.Terminal() {
			rep.Held = append(rep.Held, GCItem{Env: e.ID, What: "evidence", Reason: "command " + c.ID + " is " + ProcessState(c) + "; run 'hostfork reap'"})
			return
		}
	}
	age := time.Since(*e.StoppedAt)
	keepTrees, keepEvidence := h.retentionFor(e, cfg, opts)
	remaining := 0
	changed := false
	for i := range e.Trees {
		t := &e.Trees[i]
		if t.State != TreeAllocated {
			continue
		}
		item := GCItem{Env: e.ID, What: "tree " + t.Name, Path: t.HostPath}
		if !force && age < keepTrees {
			remaining++
			continue
		}
		if hold := h.treeHold(e, t, all); hold != "" {
			item.Reason = hold
			rep.Held = append(rep.Held, item)
			remaining++
			continue
		}
		item.Reason = fmt.Sprintf("retention %s passed (stopped %s ago)", keepTrees, age.Round(time.Second))
		if force {
			item.Reason = "forced"
		}
		if opts.DryRun {
			rep.Deleted = append(rep.Deleted, item)
			continue
		}
		var st storage.Tree
		if err := json.Unmarshal(t.Storage, &st); err != nil {
			item.Reason = "unreadable tree record: " + err.Error()
			rep.Errors = append(rep.Errors, item)
			remaining++
			continue
		}
		b, err := storage.ForKind(st.Kind)
		if err == nil {
			fault.Point(fault.GCDelete)
			err = b.Remove(ctx, st)
		}
		if err != nil {
			item.Reason = err.Error()
			rep.Errors = append(rep.Errors, item)
			remaining++
			continue
		}
		t.State = TreeRemoved
		changed = true
		rep.Deleted = append(rep.Deleted, item)
	}
	if changed {
		err := h.reg.Write(ctx, func(tx *registry.Tx) error {
			cur, err := tx.Env(e.ID)
			if err != nil {
				return err
			}
			cur.Trees = e.Trees
			if err := tx.UpdateEnv(cur); err != nil {
				return err
			}
			return tx.SettleIntentsOf(e.ID, func(kind, target string) bool {
				if kind != "tree" {
					return false
				}
				_, err := os.Stat(target)
				return errors.Is(err, os.ErrNotExist)
			})
		})
		if err != nil {
			rep.Errors = append(rep.Errors, GCItem{Env: e.ID, What: "record", Reason: "trees were deleted but the record could not be updated: " + err.Error()})
			return
		}
	}
	if !force && age < keepEvidence {
		return
	}
	item := GCItem{Env: e.ID, What: "evidence", Path: e.RunDir, Bytes: dirBytes(e.RunDir)}
	if remaining > 0 {
		item.Reason = fmt.Sprintf("%d tree(s) still retained; evidence is kept while they are", remaining)
		rep.Held = append(rep.Held, item)
		return
	}
	item.Reason = fmt.Sprintf("retention %s passed (stopped %s ago)", keepEvidence, age.Round(time.Second))
	if force {
		item.Reason = "forced"
	}
	if opts.DryRun {
		rep.Deleted = append(rep.Deleted, item)
		return
	}
	if err := os.RemoveAll(e.RunDir); err != nil {
		item.Reason = err.Error()
		rep.Errors = append(rep.Errors, item)
		return
	}
	err = h.reg.Write(ctx, func(tx *registry.Tx) error {
		if err := tx.SettleIntentsOf(e.ID, func(kind, target string) bool {
			_, err := os.Stat(target)
			return errors.Is(err, os.ErrNotExist)
		}); err != nil {
			return err
		}
		return tx.DeleteEnv(e.ID)
	})
	if err != nil {
		item.Reason = "files deleted, record kept: " + err.Error()
		rep.Errors = append(rep.Errors, item)
		return
	}
	rep.Deleted = append(rep.Deleted, item)
}

// treeHold says why a tree must be kept although its retention passed.
func (h *Host) treeHold(e *registry.Env, t *registry.TreeRecord, all []*registry.Env) string {
	if exportsInProgress(e.RunDir, t.Name) {
		return "an export of this tree has not finished"
	}
	for _, o := range all {
		if o.ID == e.ID {
			continue
		}
		for _, ot := range o.Trees {
			if ot.State == TreeAllocated && (ot.Source == t.HostPath || filepathHasPrefix(ot.Source, t.HostPath)) {
				return "tree " + ot.Name + " of environment " + o.ID + " is built on it"
			}
		}
	}
	return ""
}

// exportsInProgress reports an unfinished export of tree (its marker file
// is present and names a live process).
func exportsInProgress(runDir, tree string) bool {
	marks, _ := filepath.Glob(filepath.Join(runDir, "exports", "*"+tree+"*.inprogress"))
	for _, m := range marks {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var id struct {
			PID       int    `json:"pid"`
			StartTime uint64 `json:"start_time"`
			BootID    string `json:"boot_id"`
		}
		if json.Unmarshal(b, &id) != nil {
			return true // unreadable: keep, never guess
		}
		if assessIdentity(id.BootID, id.PID, id.StartTime) != "gone" {
			return true
		}
	}
	return false
}

// dirBytes sums apparent file sizes below dir (0 if unreadable).
func dirBytes(dir string) int64 {
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
