package planner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/spec"
)

// Baseline kinds.
const (
	BaselineSubvolume = "btrfs-subvolume"
	BaselineDirectory = "directory"
)

// inspectSource looks at a directory without changing it, through the
// descriptor safefs.OpenSource opens (links followed only where no other
// user can have planted them); path in the result is the link-free one.
func inspectSource(path string) (*Source, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%s must be an absolute path: %w", path, api.ErrInvalid)
	}
	d, err := safefs.OpenSource(path)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok && pe.Path == path {
			err = pe.Err // name the path once
		}
		return nil, fmt.Errorf("%s: %w (it must be an existing directory) (%w)", path, err, api.ErrInvalid)
	}
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return nil, err
	}
	fsType, err := d.FSType()
	if err != nil {
		return nil, &os.PathError{Op: "fstatfs", Path: path, Err: err}
	}
	b := &Source{Path: d.Path(), Kind: BaselineDirectory, FSType: storage.FSName(fsType), Dev: st.Dev, Ino: st.Ino, FSID: d.ID().FSID}
	// A btrfs subvolume's root directory always has inode 256.
	if fsType == storage.BtrfsMagic && st.Ino == 256 {
		b.Kind = BaselineSubvolume
	}
	return b, nil
}

// AddBaseline registers a prepared directory or Btrfs subvolume under name.
// It is host preparation: it only looks at the path, never changes it, and
// a baseline is never deleted by hostfork.
func (e *Planner) AddBaseline(ctx context.Context, name, path string) (*api.Baseline, error) {
	if !baselineName(name) {
		return nil, fmt.Errorf("baseline name %q: use letters, digits, '.', '-', '_' (max 63): %w", name, api.ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", path, err, api.ErrInvalid)
	}
	info, err := inspectSource(abs)
	if err != nil {
		return nil, err
	}
	abs = info.Path
	b := &api.Baseline{Name: name, Path: abs, Kind: info.Kind, Device: info.Dev, Inode: info.Ino, FSType: info.FSType, CreatedAt: time.Now().UTC()}
	if info.Kind == BaselineSubvolume {
		b.Offers = []string{spec.KindBtrfs, spec.KindOverlay, spec.KindCopy}
		b.Notes = []string{"btrfs: writable point-in-time snapshots, usable after the baseline is deleted", "overlay: requires the subvolume to stay unchanged while in use"}
	} else {
		b.Offers = []string{spec.KindOverlay, spec.KindCopy}
		b.Notes = []string{"not a btrfs subvolume (" + info.FSType + "): no snapshots; overlay needs the directory kept stable by the operator; copy is not atomic across the tree"}
	}
	var batch registry.Batch
	batch.InsertBaseline(b)
	if err := e.reg.Commit(ctx, &batch); err != nil {
		return nil, err
	}
	return b, nil
}

func baselineName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || (i > 0 && (c == '.' || c == '-' || c == '_'))
		if !ok {
			return false
		}
	}
	return true
}

// Baselines lists registered baselines.
func (e *Planner) Baselines(ctx context.Context) ([]*api.Baseline, error) {
	return e.reg.Baselines(ctx)
}

// RemoveBaseline unregisters a baseline. Its files are left alone; trees
// already made from it keep working (snapshots and copies are independent;
// an overlay still needs its lower, which the operator keeps).
func (e *Planner) RemoveBaseline(ctx context.Context, name string) error {
	var b registry.Batch
	b.DeleteBaseline(name)
	return e.reg.Commit(ctx, &b)
}
