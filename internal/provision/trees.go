package provision

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/plan"
	"github.com/habemus-papadum/hostfork/internal/planner"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/retention"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/view"
	"github.com/habemus-papadum/hostfork/spec"
)

// TreeDest chooses where a tree is allocated: snapshots and copies of a
// btrfs source go into the allocation area beside the source, on its
// filesystem (a snapshot must, and a copy can then reflink); everything
// else goes under the store (decision 18).
func TreeDest(root, envID, name, kind string, src *planner.Source) string {
	leaf := envID + "-" + name
	if src != nil && src.FSType == "btrfs" && kind != spec.KindOverlay && kind != spec.KindWorktree {
		return filepath.Join(filepath.Dir(src.Path), records.PoolName, leaf)
	}
	return filepath.Join(root, "trees", leaf)
}

// WorktreeBranch is the branch a worktree tree is made on. A fork of a
// worktree environment names its children's branches the same way, from
// each child's id (storage.Fork: from the parent's branch's commit, with
// the parent's uncommitted changes).
func WorktreeBranch(envID, tree string) string { return "hostfork/" + envID + "/" + tree }

// AllocateTrees prepares each planned tree in its allocation area (made
// private, never through a symlink). Their intents were recorded with the
// environment; their identities are recorded with its activation. On
// error the trees made so far are returned so the caller can remove them.
func AllocateTrees(ctx context.Context, rec *api.Env, p *spec.Plan, infos map[string]*planner.Source, intents map[string]*registry.Intent) ([]api.Tree, error) {
	out := []api.Tree{}
	for _, pt := range p.Trees {
		in := intents[pt.Name]
		if in == nil {
			return out, fmt.Errorf("tree %s was not reserved", pt.Name)
		}
		dest := in.Target
		pool, err := storage.PoolDir(filepath.Dir(filepath.Dir(dest)), filepath.Base(filepath.Dir(dest)))
		if err != nil {
			return out, fmt.Errorf("tree %s: %w", pt.Name, err)
		}
		b, err := storage.ForKind(storage.Kind(pt.Kind))
		if err != nil {
			pool.Close()
			return out, err
		}
		req := storage.Request{Dest: dest, Source: pt.Source, Pool: pool}
		if pt.Kind == spec.KindWorktree {
			req.Ref, req.Branch = pt.Ref, WorktreeBranch(rec.ID, pt.Name)
		}
		if info := infos[pt.Name]; info != nil {
			req.Source = info.Path
			req.SourceID = &safefs.FileID{Dev: info.Dev, Ino: info.Ino, FSID: info.FSID}
		}
		t, err := b.Prepare(ctx, req)
		pool.Close()
		if err != nil {
			return out, fmt.Errorf("preparing tree %s (%s of %s): %w", pt.Name, pt.Kind, pt.Source, err)
		}
		fault.Point(fault.TreePrepared)
		raw, _ := json.Marshal(t)
		tr := api.Tree{
			Name: pt.Name, Kind: pt.Kind, Baseline: pt.Baseline, Source: pt.Source,
			HostPath: t.Path, WorkloadPath: pt.Target, Storage: raw, State: api.TreeAllocated,
		}
		if t.Copy != nil {
			tr.Note = fmt.Sprintf("copied %d files, reflink %s", t.Copy.Files, t.Copy.Reflink)
		}
		if w := t.Worktree; w != nil {
			tr.Note = fmt.Sprintf("git worktree of %s on branch %s, from %s", w.Repo, w.Branch, w.Commit)
		}
		out = append(out, tr)
	}
	return out, nil
}

// RemoveTrees deletes trees (identity-checked by the backend); it is used
// only to undo a failed creation. Errors are returned as text for the
// record.
func RemoveTrees(ctx context.Context, root, envID string, trees []api.Tree) []string {
	var errs []string
	for i := range trees {
		t := &trees[i]
		if t.State != api.TreeAllocated {
			continue
		}
		if err := retention.UndoTree(ctx, root, envID, t); err != nil {
			errs = append(errs, fmt.Sprintf("removing tree %s: %v", t.Name, err))
			continue
		}
		t.State = api.TreeRemoved
	}
	return errs
}

// ViewOps turns the planned rules and the allocated trees into the view's
// operations. Each tree is opened by descriptor and checked against its
// record first; its mounts name those descriptors as the keeper will see
// them (/proc/self/fd/N, from supervise.KeeperFirstFile on), and the files
// are returned to be handed to the keeper (the caller closes them).
func ViewOps(ctx context.Context, p *spec.Plan, trees []api.Tree) (ops []view.Op, files []*os.File, err error) {
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	byName := map[string]api.Tree{}
	for _, t := range trees {
		byName[t.Name] = t
	}
	for _, r := range p.View.Rules {
		why := r.Kind + " " + r.Target
		switch r.Kind {
		case plan.Replace:
			tr, ok := byName[r.Tree]
			if !ok {
				return nil, nil, fmt.Errorf("tree %s was not allocated", r.Tree)
			}
			var st storage.Tree
			if err := json.Unmarshal(tr.Storage, &st); err != nil {
				return nil, nil, err
			}
			b, err := storage.ForKind(st.Kind)
			if err != nil {
				return nil, nil, err
			}
			opened, err := b.Open(ctx, st)
			if err != nil {
				return nil, nil, fmt.Errorf("tree %s: %w", tr.Name, err)
			}
			base := supervise.KeeperFirstFile + len(files)
			files = append(files, opened.Files...)
			ms := opened.Mounts(func(i int) string { return "/proc/self/fd/" + strconv.Itoa(base+i) })
			for i := range ms {
				ops = append(ops, view.Op{Kind: view.OpMount, Target: r.Target, Mount: &ms[i], Mkdir: r.Mkdir, Why: why})
			}
		case plan.Scratch:
			ops = append(ops, view.Op{Kind: view.OpTmpfs, Target: r.Target, Mkdir: r.Mkdir, Why: why})
		case plan.ReadOnly:
			if r.Rest {
				ops = append(ops, view.Op{Kind: view.OpReadOnlyMount, Target: r.Target, Why: why})
				break
			}
			ops = append(ops, view.Op{Kind: view.OpReadOnly, Target: r.Target, Mkdir: r.Mkdir, Why: why})
		case plan.Share:
			if r.Restore {
				// The covering rule may lack the path (an empty scratch, a
				// tree without it): the mount point is made in that layer.
				ops = append(ops, view.Op{Kind: view.OpRestore, Target: r.Target, Mkdir: true, Why: why})
			}
		}
	}
	return ops, files, nil
}

// ForkTrees takes each planned tree of a fork's child from the tree of the
// same name in from (storage.Fork) at the destination reserved for it:
// the parent's trees (fromID is the parent), or a sibling's taken at the
// fork instant and not written since. The caller has frozen every writer
// of the trees in from. On error the trees made so far are returned so the
// caller can remove them.
func ForkTrees(ctx context.Context, childID, parentID, fromID string, parent []api.Tree, p *spec.Plan, intents map[string]*registry.Intent) ([]api.Tree, error) {
	byName := map[string]api.Tree{}
	for _, t := range parent {
		byName[t.Name] = t
	}
	out := []api.Tree{}
	for _, pt := range p.Trees {
		in := intents[pt.Name]
		if in == nil {
			return out, fmt.Errorf("tree %s was not reserved", pt.Name)
		}
		from, ok := byName[pt.Name]
		if !ok || from.State != api.TreeAllocated {
			return out, fmt.Errorf("%s has no allocated tree %s to fork (removed by gc?): %w", fromID, pt.Name, api.ErrInvalid)
		}
		var st storage.Tree
		if err := json.Unmarshal(from.Storage, &st); err != nil {
			return out, fmt.Errorf("tree %s: reading the parent's record: %w", pt.Name, err)
		}
		dest := in.Target
		pool, err := storage.PoolDir(filepath.Dir(filepath.Dir(dest)), filepath.Base(filepath.Dir(dest)))
		if err != nil {
			return out, fmt.Errorf("tree %s: %w", pt.Name, err)
		}
		req := storage.Request{Dest: dest, Pool: pool}
		if st.Kind == storage.KindWorktree {
			req.Branch = WorktreeBranch(childID, pt.Name)
		}
		t, err := storage.Fork(ctx, st, req)
		pool.Close()
		if err != nil {
			return out, fmt.Errorf("forking tree %s of %s: %w", pt.Name, fromID, err)
		}
		fault.Point(fault.ForkTreeTaken)
		raw, _ := json.Marshal(t)
		tr := api.Tree{
			Name: pt.Name, Kind: pt.Kind, Baseline: pt.Baseline, Source: pt.Source,
			HostPath: t.Path, WorkloadPath: pt.Target, Storage: raw, State: api.TreeAllocated,
			Note: forkNote(parentID, fromID, t),
		}
		out = append(out, tr)
	}
	return out, nil
}

// forkNote says how a fork's tree was taken.
func forkNote(parentID, fromID string, t storage.Tree) string {
	whose := "the parent's"
	if fromID != parentID {
		whose = "sibling " + fromID + "'s (taken at the fork instant)"
	}
	how := "snapshot of " + whose + " snapshot"
	ct := t.Copy
	if w := t.Worktree; w != nil {
		ct = w.FilesCopy
		how = fmt.Sprintf("git worktree of %s on branch %s, from %s's commit %s, with %s files (uncommitted changes included)", w.Repo, w.Branch, w.Ref, w.Commit, whose)
	} else if t.Overlay != nil {
		ct = t.Overlay.UpperCopy
		how = whose + " upper"
	} else if ct != nil {
		how = whose + " copy"
	}
	if ct != nil {
		verb := "copied"
		switch ct.Reflink {
		case storage.ReflinkAll:
			verb = "cloned (reflink)"
		case storage.ReflinkPartial:
			verb = "partly cloned (reflink), partly copied"
		case storage.ReflinkNone:
			if ct.Files > 0 {
				verb = "copied (no reflink on this filesystem)"
			}
		}
		how = fmt.Sprintf("%s %s: %d files, %d bytes, reflink %s", how, verb, ct.Files, ct.Bytes, ct.Reflink)
	}
	return "forked from " + parentID + ": " + how
}
