package hostfork

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/plan"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/view"
	"github.com/habemus-papadum/hostfork/spec"
)

// Tree states.
const (
	TreeAllocated = "allocated"
	TreeRemoved   = "removed"
)

// treeDest chooses where a tree is allocated: snapshots and copies of a
// btrfs source go into a pool directory on the source's filesystem (a
// snapshot must, and a copy can then reflink); everything else goes under
// the store.
func (h *Host) treeDest(envID, name string, kind string, src *baselineInfo) string {
	leaf := envID + "-" + name
	if src != nil && src.fstype == "btrfs" && kind != spec.KindOverlay {
		return filepath.Join(filepath.Dir(src.path), ".hostfork-trees", leaf)
	}
	return filepath.Join(h.root, "trees", leaf)
}

// allocateTrees prepares each planned tree, with an intent recorded before
// and the identity after. On error the trees made so far are returned so
// the caller can remove them.
func (h *Host) allocateTrees(ctx context.Context, rec *registry.Env, p *Plan) ([]registry.TreeRecord, error) {
	var out []registry.TreeRecord
	for _, pt := range p.Trees {
		src := p.baselines[pt.Name]
		dest := h.treeDest(rec.ID, pt.Name, pt.Kind, src)
		var intent int64
		if err := h.reg.Write(ctx, func(tx *registry.Tx) error {
			var err error
			intent, err = tx.AddIntent(rec.ID, "", "tree", dest)
			return err
		}); err != nil {
			return out, fmt.Errorf("recording tree %s: %w", pt.Name, err)
		}
		if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
			return out, fmt.Errorf("tree %s: creating %s: %w", pt.Name, filepath.Dir(dest), err)
		}
		b, err := storage.ForKind(storage.Kind(pt.Kind))
		if err != nil {
			return out, err
		}
		t, err := b.Prepare(ctx, storage.Request{Dest: dest, Source: pt.Source})
		if err != nil {
			_ = h.reg.Write(ctx, func(tx *registry.Tx) error {
				return tx.SettleIntent(intent, registry.IntentAbandoned, "", err.Error())
			})
			return out, fmt.Errorf("preparing tree %s (%s of %s): %w", pt.Name, pt.Kind, pt.Source, err)
		}
		fault.Point(fault.TreePrepared)
		raw, _ := json.Marshal(t)
		tr := registry.TreeRecord{
			Name: pt.Name, Kind: pt.Kind, Baseline: pt.Baseline, Source: pt.Source,
			HostPath: t.Path, WorkloadPath: pt.Target, Storage: raw, State: TreeAllocated,
		}
		if t.Copy != nil {
			tr.Note = fmt.Sprintf("copied %d files, reflink %s", t.Copy.Files, t.Copy.Reflink)
		}
		out = append(out, tr)
		if err := h.reg.Write(ctx, func(tx *registry.Tx) error {
			return tx.SettleIntent(intent, registry.IntentCreated, string(raw), "")
		}); err != nil {
			return out, fmt.Errorf("recording tree %s: %w", pt.Name, err)
		}
	}
	return out, nil
}

// removeTrees deletes trees (identity-checked by the backend); it is used
// only to undo a failed creation. Errors are returned as text for the
// record.
func (h *Host) removeTrees(ctx context.Context, trees []registry.TreeRecord) []string {
	var errs []string
	for i := range trees {
		t := &trees[i]
		if t.State != TreeAllocated {
			continue
		}
		var st storage.Tree
		if err := json.Unmarshal(t.Storage, &st); err != nil {
			errs = append(errs, fmt.Sprintf("tree %s: unreadable record: %v", t.Name, err))
			continue
		}
		b, err := storage.ForKind(st.Kind)
		if err == nil {
			err = b.Remove(ctx, st)
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("removing tree %s: %v", t.Name, err))
			continue
		}
		t.State = TreeRemoved
	}
	return errs
}

// viewOps turns the planned rules and the allocated trees into the
// keeper's mount operations.
func viewOps(p *Plan, trees []registry.TreeRecord) ([]view.Op, error) {
	byName := map[string]registry.TreeRecord{}
	for _, t := range trees {
		byName[t.Name] = t
	}
	var ops []view.Op
	for _, r := range p.View.Rules {
		why := r.Kind + " " + r.Target
		switch r.Kind {
		case plan.Replace:
			tr, ok := byName[r.Tree]
			if !ok {
				return nil, fmt.Errorf("tree %s was not allocated", r.Tree)
			}
			var st storage.Tree
			if err := json.Unmarshal(tr.Storage, &st); err != nil {
				return nil, err
			}
			b, err := storage.ForKind(st.Kind)
			if err != nil {
				return nil, err
			}
			ms, err := b.Mounts(st)
			if err != nil {
				return nil, err
			}
			for i := range ms {
				ops = append(ops, view.Op{Kind: view.OpMount, Target: r.Target, Mount: &ms[i], Mkdir: r.Mkdir, Why: why})
			}
		case plan.Scratch:
			ops = append(ops, view.Op{Kind: view.OpTmpfs, Target: r.Target, Mkdir: r.Mkdir, Why: why})
		case plan.ReadOnly:
			ops = append(ops, view.Op{Kind: view.OpReadOnly, Target: r.Target, Mkdir: r.Mkdir, Why: why})
		case plan.Share:
			if r.Restore {
				// The covering rule may lack the path (an empty scratch, a
				// tree without it): the mount point is made in that layer.
				ops = append(ops, view.Op{Kind: view.OpRestore, Target: r.Target, Mkdir: true, Why: why})
			}
		}
	}
	return ops, nil
}
