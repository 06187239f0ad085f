package hostfork

import (
	"github.com/habemus-papadum/hostfork/internal/storage"

	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/spec"
)

// Baseline kinds.
const (
	BaselineSubvolume = "btrfs-subvolume"
	BaselineDirectory = "directory"
)

type baselineInfo struct {
	path   string
	kind   string
	fstype string
	dev    uint64
	ino    uint64
}

// inspectSource looks at a directory without changing it.
func inspectSource(path string) (*baselineInfo, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%s must be an absolute path: %w", path, ErrInvalid)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("%s: %v (it must be an existing directory): %w", path, err, ErrInvalid)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("%s is not a directory: %w", path, ErrInvalid)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return nil, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	b := &baselineInfo{path: path, kind: BaselineDirectory, fstype: storage.FSName(int64(fs.Type)), dev: st.Dev, ino: st.Ino}
	// A btrfs subvolume's root directory always has inode 256.
	if int64(fs.Type) == unix.BTRFS_SUPER_MAGIC && st.Ino == 256 {
		b.kind = BaselineSubvolume
	}
	return b, nil
}

// kernelHas reports whether the running kernel lists fs in
// /proc/filesystems.
func kernelHas(fs string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(strings.TrimPrefix(line, "nodev")) == fs {
			return true
		}
	}
	return false
}

// AddBaseline registers a prepared directory or Btrfs subvolume under name.
// It is host preparation: it only looks at the path, never changes it, and
// a baseline is never deleted by hostfork.
func (h *Host) AddBaseline(ctx context.Context, name, path string) (*registry.Baseline, error) {
	if !baselineName(name) {
		return nil, fmt.Errorf("baseline name %q: use letters, digits, '.', '-', '_' (max 63): %w", name, ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", path, err, ErrInvalid)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	info, err := inspectSource(abs)
	if err != nil {
		return nil, err
	}
	b := &registry.Baseline{Name: name, Path: abs, Kind: info.kind, Device: info.dev, Inode: info.ino, FSType: info.fstype, CreatedAt: time.Now().UTC()}
	if info.kind == BaselineSubvolume {
		b.Offers = []string{spec.KindBtrfs, spec.KindOverlay, spec.KindCopy}
		b.Notes = []string{"btrfs: writable point-in-time snapshots, usable after the baseline is deleted", "overlay: requires the subvolume to stay unchanged while in use"}
	} else {
		b.Offers = []string{spec.KindOverlay, spec.KindCopy}
		b.Notes = []string{"not a btrfs subvolume (" + info.fstype + "): no snapshots; overlay needs the directory kept stable by the operator; copy is not atomic across the tree"}
	}
	if err := h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.InsertBaseline(b) }); err != nil {
		if errors.Is(err, registry.ErrConflict) {
			return nil, fmt.Errorf("%v: %w", err, ErrInvalid)
		}
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
func (h *Host) Baselines(ctx context.Context) ([]*registry.Baseline, error) {
	return h.reg.Baselines(ctx)
}

// RemoveBaseline unregisters a baseline. Its files are left alone; trees
// already made from it keep working (snapshots and copies are independent;
// an overlay still needs its lower, which the operator keeps).
func (h *Host) RemoveBaseline(ctx context.Context, name string) error {
	return h.reg.Write(ctx, func(tx *registry.Tx) error { return tx.DeleteBaseline(name) })
}

// planTree checks one tree against the host and the registered baselines.
func (h *Host) planTree(ctx context.Context, p *Plan, t *PlannedTree) error {
	src := t.Source
	if t.Baseline != "" {
		b, err := h.reg.Baseline(ctx, t.Baseline)
		if err != nil {
			if errors.Is(err, registry.ErrNotFound) {
				return fmt.Errorf("tree %s: no baseline named %q (register it with 'hostfork baseline add %s PATH'): %w", t.Name, t.Baseline, t.Baseline, ErrInvalid)
			}
			return err
		}
		src = b.Path
		t.Source = b.Path
	}
	info, err := inspectSource(src)
	if err != nil {
		return fmt.Errorf("tree %s: %w", t.Name, err)
	}
	if t.Baseline != "" {
		b, _ := h.reg.Baseline(ctx, t.Baseline)
		if b != nil && (b.Device != info.dev || b.Inode != info.ino) {
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("tree %s: baseline %s at %s is no longer the directory registered (device/inode changed); re-register it", t.Name, t.Baseline, src))
		}
	}
	p.baselines[t.Name] = info
	switch t.Kind {
	case spec.KindBtrfs:
		t.Consistency = "point-in-time writable snapshot of the subvolume; independent of the source after creation"
		if !kernelHas("btrfs") {
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("tree %s: the kernel has no btrfs support (load the btrfs module), and kind btrfs never falls back to another mechanism", t.Name))
		} else if info.kind != BaselineSubvolume {
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("tree %s: kind btrfs needs a btrfs subvolume, but %s is a directory on %s; prepare a subvolume and register it ('hostfork baseline add'), or choose kind overlay or copy explicitly", t.Name, src, info.fstype))
		}
	case spec.KindOverlay:
		t.Consistency = "live overlay over the source: the source must stay unchanged while the tree is in use (operator-declared stable); reopening needs the source"
		if !kernelHas("overlay") {
			p.Unsupported = append(p.Unsupported, fmt.Sprintf("tree %s: the kernel has no overlay filesystem (modprobe overlay), and kind overlay never falls back", t.Name))
		}
	case spec.KindCopy:
		t.Consistency = "independent copy made file by file at creation: not atomic across the tree; reflinked where the filesystem allows"
	}
	return nil
}

func ensureDir(p string) error { return os.MkdirAll(p, 0o755) }
