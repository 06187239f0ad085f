package hostfork

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/view"
)

// Export labels (DESIGN.md; seed "Lifetime, recovery and forensic
// evidence").
const (
	// ExportComplete: every file was copied from a stopped environment.
	ExportComplete = "complete"
	// ExportLive: every file was copied, but the environment was running,
	// so the copy is not a consistent point in time.
	ExportLive = "live/inconsistent"
	// ExportPartial: some files could not be copied (listed).
	ExportPartial = "partial"
	// ExportFailed: the export did not produce a usable copy.
	ExportFailed = "failed"
)

// ExportResult is the record of one export, also written to
// runs/<env>/exports/.
type ExportResult struct {
	Env        string    `json:"env"`
	Tree       string    `json:"tree"`
	Kind       string    `json:"kind"`
	Dest       string    `json:"dest"`
	Label      string    `json:"label"`
	Source     string    `json:"source"`
	Files      int64     `json:"files"`
	Bytes      int64     `json:"bytes"`
	Cloned     int64     `json:"cloned"`
	Failed     int64     `json:"failed"`
	Errors     []string  `json:"errors,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// ExportOptions configure Export.
type ExportOptions struct {
	// Progress is called as files are copied, with the total counted
	// beforehand (0 if counting was skipped).
	Progress func(files, total int64)
}

// Export copies an environment's tree out to dest (which must not exist)
// and labels the result. It works while the environment runs (labelled
// live/inconsistent) and after it stopped: a snapshot or copy is read
// directly, an overlay is read through the live view or, when the keeper
// is gone, through a view rebuilt from its recorded lower and upper.
func (h *Host) Export(ctx context.Context, envPrefix, tree, dest string, opts ExportOptions) (*ExportResult, error) {
	kind, id, err := h.reg.Resolve(ctx, envPrefix)
	if err != nil {
		return nil, err
	}
	if kind != "env" {
		return nil, fmt.Errorf("%s is a command; give its environment: %w", id, ErrInvalid)
	}
	e, err := h.reg.Env(ctx, id)
	if err != nil {
		return nil, err
	}
	var tr *registry.TreeRecord
	for i := range e.Trees {
		if e.Trees[i].Name == tree {
			tr = &e.Trees[i]
		}
	}
	if tr == nil {
		names := []string{}
		for _, t := range e.Trees {
			names = append(names, t.Name)
		}
		return nil, fmt.Errorf("environment %s has no tree %q (it has %v): %w", id, tree, names, ErrInvalid)
	}
	if tr.State != TreeAllocated {
		return nil, fmt.Errorf("tree %s of %s was deleted by retention: %w", tree, id, ErrInvalid)
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return nil, fmt.Errorf("--to %s: %v: %w", dest, err, ErrInvalid)
	}
	if _, err := os.Lstat(abs); err == nil {
		return nil, fmt.Errorf("--to %s already exists; export never writes into an existing path: %w", abs, ErrInvalid)
	}
	if st, err := os.Stat(filepath.Dir(abs)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--to %s: its parent directory does not exist: %w", abs, ErrInvalid)
	}
	var st storage.Tree
	if err := json.Unmarshal(tr.Storage, &st); err != nil {
		return nil, fmt.Errorf("tree %s: unreadable record: %w", tree, err)
	}
	res := &ExportResult{Env: id, Tree: tree, Kind: tr.Kind, Dest: abs, StartedAt: time.Now().UTC()}
	live := e.State == registry.EnvActive || e.State == registry.EnvStopping || e.State == registry.EnvCreating
	// Hold the tree against gc while we copy.
	expDir := filepath.Join(e.RunDir, "exports")
	if err := os.MkdirAll(expDir, 0o700); err != nil {
		return nil, err
	}
	stamp := res.StartedAt.Format("20060102T150405.000000000Z") + "-" + tree
	marker := filepath.Join(expDir, stamp+".inprogress")
	self, _ := linux.IdentityOf(os.Getpid())
	if b, err := json.Marshal(self); err == nil {
		if err := os.WriteFile(marker, b, 0o600); err != nil {
			return nil, fmt.Errorf("marking the export: %w", err)
		}
	}
	defer os.Remove(marker)

	src := st.Path
	var cleanup func()
	if st.Kind == storage.KindOverlay {
		src, cleanup, err = h.overlaySource(ctx, e, tr, st)
		if err != nil {
			res.Label = ExportFailed
			res.Errors = []string{err.Error()}
			res.FinishedAt = time.Now().UTC()
			h.recordExport(expDir, stamp, res)
			return res, err
		}
		defer cleanup()
	}
	res.Source = src
	var total int64
	if opts.Progress != nil {
		total = countFiles(src)
	}
	cr, cerr := storage.CopyDir(ctx, src, abs, storage.CopyOptions{Tolerate: true, Progress: func(files, _ int64) {
		if opts.Progress != nil {
			opts.Progress(files, total)
		}
	}})
	res.Files, res.Bytes, res.Cloned, res.Failed, res.Errors = cr.Files, cr.Bytes, cr.Cloned, cr.Failed, cr.Errors
	res.FinishedAt = time.Now().UTC()
	switch {
	case cerr != nil:
		res.Label = ExportFailed
		res.Errors = append(res.Errors, cerr.Error())
	case cr.Failed > 0:
		res.Label = ExportPartial
	case live:
		res.Label = ExportLive
	default:
		res.Label = ExportComplete
	}
	h.recordExport(expDir, stamp, res)
	if cerr != nil {
		return res, fmt.Errorf("exporting tree %s: %w", tree, cerr)
	}
	return res, nil
}

func (h *Host) recordExport(dir, stamp string, res *ExportResult) {
	b, err := json.MarshalIndent(res, "", "  ")
	if err == nil {
		_ = os.WriteFile(filepath.Join(dir, stamp+".json"), append(b, '\n'), 0o600)
	}
}

// overlaySource returns a host path through which the merged overlay can
// be read: the live keeper's view, or a temporary keeper that rebuilds the
// view from the recorded lower and upper (the lower is verified first).
func (h *Host) overlaySource(ctx context.Context, e *registry.Env, tr *registry.TreeRecord, st storage.Tree) (string, func(), error) {
	if e.Keeper != nil && linux.Assess(linuxIdentity(e.Keeper)) == linux.Alive && tr.WorkloadPath != "" {
		return view.RootPath(e.Keeper.PID, tr.WorkloadPath), func() {}, nil
	}
	mounts, err := storage.Reopen(ctx, st)
	if err != nil {
		return "", nil, fmt.Errorf("rebuilding the overlay view: %w", err)
	}
	tmp, err := os.MkdirTemp(h.root, ".export-view-")
	if err != nil {
		return "", nil, err
	}
	ops := make([]view.Op, 0, len(mounts))
	for i := range mounts {
		ops = append(ops, view.Op{Kind: view.OpMount, Target: tmp, Mount: &mounts[i], Why: "export " + tr.Name})
	}
	klog, _ := os.OpenFile(filepath.Join(e.RunDir, "export-keeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	k, err := view.StartKeeper(h.opts.Exe, "", klog, &view.KeeperConfig{EnvID: e.ID, Ops: ops, OwnerExit: OwnerExitStop})
	if klog != nil {
		klog.Close()
	}
	if err != nil {
		os.Remove(tmp)
		return "", nil, err
	}
	_ = k.Commit("")
	cleanup := func() {
		k.Detach() // owner-exit stop: the keeper exits and its mount goes
		stopKeeper(context.Background(), regIdentity(k.ID))
		os.Remove(tmp)
	}
	return view.RootPath(k.ID.PID, tmp), cleanup, nil
}

func countFiles(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}
