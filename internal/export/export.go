package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/view"
)

// Exporter copies trees out of one store.
type Exporter struct {
	root string
	reg  *records.Records
	exe  string // re-executed as a temporary keeper
}

// New is the exporter of the store at root; exe is the program started as
// a keeper to rebuild an overlay's view.
func New(root string, reg *records.Records, exe string) *Exporter {
	return &Exporter{root: root, reg: reg, exe: exe}
}

// ExportOptions configure Export.
type ExportOptions struct {
	// Progress is called as files are copied, with the total counted
	// beforehand (0 if counting was skipped).
	Progress func(files, total int64)
}

// Export copies an environment's tree out to dest and labels the result.
// dest must not exist: hostfork creates it (a partial copy is built under
// another name and renamed into place only when the copy ends), walks
// everything by descriptors without following symlinks, and sets metadata
// on descriptors. It works while the environment runs (labelled
// live/inconsistent) and after it stopped: a snapshot or copy is read
// directly, an overlay through the live view or, when the keeper is gone,
// through a view rebuilt from its recorded lower and upper.
func (e *Exporter) Export(ctx context.Context, envID, tree, dest string, opts ExportOptions) (*api.ExportResult, error) {
	env, err := e.reg.Env(ctx, envID)
	if err != nil {
		return nil, err
	}
	var tr *api.Tree
	names := []string{}
	for i := range env.Trees {
		names = append(names, env.Trees[i].Name)
		if env.Trees[i].Name == tree {
			tr = &env.Trees[i]
		}
	}
	if tr == nil {
		return nil, fmt.Errorf("environment %s has no tree %q (it has %v): %w", envID, tree, names, api.ErrNotFound)
	}
	if tr.State != api.TreeAllocated {
		return nil, fmt.Errorf("tree %s of %s was deleted by retention: %w", tree, envID, api.ErrNotFound)
	}
	abs, err := filepath.Abs(dest)
	if err != nil {
		return nil, fmt.Errorf("--to %s: %v: %w", dest, err, api.ErrInvalid)
	}
	if _, err := os.Lstat(abs); err == nil {
		return nil, fmt.Errorf("--to %s already exists; an export creates its destination and never writes into an existing path: %w", abs, api.ErrExists)
	}
	if st, err := os.Stat(filepath.Dir(abs)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("--to %s: its parent directory does not exist: %w", abs, api.ErrInvalid)
	}
	var st storage.Tree
	if err := json.Unmarshal(tr.Storage, &st); err != nil {
		return nil, fmt.Errorf("tree %s: unreadable record: %w", tree, err)
	}
	res := &api.ExportResult{Env: envID, Tree: tree, Kind: tr.Kind, Dest: abs, StartedAt: time.Now().UTC()}
	live := !env.State.Final()
	// Hold the tree against gc while we copy.
	expDir := filepath.Join(env.RunDir, "exports")
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
	if st.Kind == storage.KindOverlay {
		var cleanup func()
		src, cleanup, err = e.overlaySource(ctx, env, tr, st)
		if err != nil {
			res.Label = api.ExportFailed
			res.Errors = []string{err.Error()}
			res.FinishedAt = time.Now().UTC()
			recordExport(expDir, stamp, res)
			return res, fmt.Errorf("exporting tree %s: %v: %w", tree, err, api.ErrExportFailed)
		}
		defer cleanup()
	}
	res.Source = src
	if st.Kind == storage.KindOverlay && st.Overlay != nil {
		// What was read, not the keeper's /proc path that reached it.
		res.Source = st.Overlay.Upper + " over " + st.Overlay.Lower
	}
	fault.Point(fault.ExportCopying)
	var total int64
	if opts.Progress != nil {
		total = countFiles(src)
	}
	cr, cerr := storage.CopyDir(ctx, src, abs, storage.CopyOptions{Tolerate: true, Progress: func(files, _ int64) {
		if opts.Progress != nil {
			opts.Progress(files, total)
		}
	}})
	res.Files, res.Bytes, res.Cloned, res.Failed, res.Errors, res.PartialPath = cr.Files, cr.Bytes, cr.Cloned, cr.Failed, cr.Errors, cr.PartialPath
	res.FinishedAt = time.Now().UTC()
	switch {
	case cerr != nil:
		res.Label = api.ExportFailed
		res.Errors = append(res.Errors, cerr.Error())
	case cr.Failed > 0:
		res.Label = api.ExportPartial
	case live:
		res.Label = api.ExportLive
	default:
		res.Label = api.ExportComplete
		if st.Kind == storage.KindOverlay && st.Overlay != nil {
			// The lower is borrowed: changed in place since the tree was
			// made, the merged tree is no longer what the environment saw.
			if p := changedSince(st.Overlay.Lower, env.CreatedAt); p != "" {
				res.Label = api.ExportLive
				res.Note = "the overlay's lower changed in place after the environment was created (" + p + "): the merged tree mixes the environment's changes with later ones"
			}
		}
	}
	recordExport(expDir, stamp, res)
	if cerr != nil {
		where := ""
		if res.PartialPath != "" {
			where = "; what was copied is in " + res.PartialPath
		}
		if errors.Is(cerr, api.ErrExists) || errors.Is(cerr, os.ErrExist) {
			return res, fmt.Errorf("exporting tree %s: %v%s: %w", tree, cerr, where, api.ErrExists)
		}
		return res, fmt.Errorf("exporting tree %s: %v%s: %w", tree, cerr, where, api.ErrExportFailed)
	}
	return res, nil
}

// exportViewPrefix begins the name of the empty directory in the store
// root on which a temporary keeper mounts an overlay tree for an export.
const exportViewPrefix = ".export-view-"

// Sweep settles exports a crash interrupted (issue 39, item 12):
// an in-progress marker whose process is gone becomes a failed export
// record (unless the export recorded its own result) and goes; an export
// view directory of an environment with no live export is removed (it is
// empty: the mount was only ever in the temporary keeper's namespace).
func Sweep(root string, rep *api.ReapReport) {
	marks, _ := filepath.Glob(filepath.Join(root, "runs", "*", "exports", "*.inprogress"))
	for _, m := range marks {
		env := filepath.Base(filepath.Dir(filepath.Dir(m)))
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var id linux.Identity
		if json.Unmarshal(b, &id) != nil || linux.Assess(id) != linux.Gone {
			continue // unreadable or alive: never guess
		}
		stamp := strings.TrimSuffix(filepath.Base(m), ".inprogress")
		result := filepath.Join(filepath.Dir(m), stamp+".json")
		if _, err := os.Lstat(result); errors.Is(err, os.ErrNotExist) {
			tree := stamp
			if i := strings.LastIndex(stamp, "Z-"); i >= 0 {
				tree = stamp[i+2:]
			}
			res := &api.ExportResult{Env: env, Tree: tree, Label: api.ExportFailed,
				Errors: []string{fmt.Sprintf("the export was interrupted: its process (pid %d) is gone; whatever it copied is incomplete", id.PID)}, FinishedAt: time.Now().UTC()}
			recordExport(filepath.Dir(m), stamp, res)
		}
		if os.Remove(m) == nil {
			rep.Actions = append(rep.Actions, api.ReapAction{Env: env, Action: "settled-export", Detail: "interrupted export " + stamp + " recorded as failed"})
		}
	}
	views, _ := filepath.Glob(filepath.Join(root, exportViewPrefix+"*"))
	for _, v := range views {
		rest := strings.TrimPrefix(filepath.Base(v), exportViewPrefix)
		env, _, ok := strings.Cut(rest, "-")
		if !ok || InProgress(filepath.Join(root, "runs", env), "") {
			continue
		}
		if safefs.RemoveEmptyDir(v) == nil {
			rep.Actions = append(rep.Actions, api.ReapAction{Env: env, Action: "removed-export-view", Detail: v})
		}
	}
}

// RecordedBytes is what the retained exports of the environment whose run
// directory is runDir copied out (their records' bytes), not the size of
// the records themselves.
func RecordedBytes(runDir string) int64 {
	files, _ := filepath.Glob(filepath.Join(runDir, "exports", "*.json"))
	var n int64
	for _, f := range files {
		var r api.ExportResult
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &r) == nil {
			n += r.Bytes
		}
	}
	return n
}

func recordExport(dir, stamp string, res *api.ExportResult) {
	records.WriteJSON(filepath.Join(dir, stamp+".json"), res)
}

// overlaySource returns a host path through which the merged overlay can
// be read: the live keeper's view, or a temporary keeper that rebuilds the
// view from the recorded lower and upper (the lower is verified first).
func (e *Exporter) overlaySource(ctx context.Context, env *api.Env, tr *api.Tree, st storage.Tree) (string, func(), error) {
	if env.Keeper != nil && linux.Assess(records.ToLinux(env.Keeper)) == linux.Alive && tr.WorkloadPath != "" {
		return view.RootPath(env.Keeper.PID, tr.WorkloadPath), func() {}, nil
	}
	b, err := storage.ForKind(st.Kind)
	if err != nil {
		return "", nil, err
	}
	opened, err := b.Open(ctx, st)
	if err != nil {
		return "", nil, fmt.Errorf("rebuilding the overlay view: %w", err)
	}
	defer opened.Close()
	mounts := opened.Mounts(func(i int) string { return "/proc/self/fd/" + strconv.Itoa(supervise.KeeperFirstFile+i) })
	// Named for its environment, so that a reap after a crash can tell
	// whether an export of that environment still uses it.
	tmp, err := os.MkdirTemp(e.root, exportViewPrefix+env.ID+"-")
	if err != nil {
		return "", nil, err
	}
	ops := make([]view.Op, 0, len(mounts))
	for i := range mounts {
		ops = append(ops, view.Op{Kind: view.OpMount, Target: tmp, Mount: &mounts[i], Why: "export " + tr.Name})
	}
	kops, err := view.Compile(ops)
	if err != nil {
		os.Remove(tmp)
		return "", nil, err
	}
	klog, _ := os.OpenFile(filepath.Join(env.RunDir, "export-keeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	k, err := supervise.StartKeeper(&supervise.KeeperSpec{Exe: e.exe, Log: klog, EnvID: env.ID, OwnerExit: api.OwnerExitStop, Ops: kops, Files: opened.Files})
	if klog != nil {
		klog.Close()
	}
	if err != nil {
		os.Remove(tmp)
		return "", nil, err
	}
	_ = k.Commit("", "")
	cleanup := func() {
		k.Detach() // owner-exit stop: the keeper exits and its mount goes
		supervise.StopKeeper(context.Background(), k.ID)
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

// InProgress reports an unfinished export of tree (its marker file
// is present and names a live process).
func InProgress(runDir, tree string) bool {
	marks, _ := filepath.Glob(filepath.Join(runDir, "exports", "*"+tree+"*.inprogress"))
	for _, m := range marks {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var id linux.Identity
		if json.Unmarshal(b, &id) != nil {
			return true // unreadable: keep, never guess
		}
		if linux.Assess(id) != linux.Gone {
			return true
		}
	}
	return false
}

// changedSince returns the first path under dir (not following symlinks)
// whose inode changed after t, or "" when none did.
func changedSince(dir string, t time.Time) string {
	found := ""
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info() // lstat: symlinks are not followed
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && time.Unix(st.Ctim.Unix()).After(t) {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found
}
