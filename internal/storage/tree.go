package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Kind names a private-tree mechanism. Selection is explicit per tree;
// there is no fallback from one kind to another.
type Kind string

// The tree kinds.
const (
	KindBtrfs   Kind = "btrfs"   // writable snapshot of a baseline subvolume
	KindOverlay Kind = "overlay" // owned upper/work over a stable lower
	KindCopy    Kind = "copy"    // independent copy, reflinked where possible
)

// Names of the entries Prepare creates inside a destination.
const (
	treeDirName  = "tree"  // btrfs snapshot / copied directory
	upperDirName = "upper" // overlay upper
	workDirName  = "work"  // overlay work
)

// Request asks a backend for one private tree.
type Request struct {
	// Dest is the unique, owned directory the tree is allocated in. It
	// must be absolute and must not exist; its parent must. Prepare
	// creates it exclusively and fails with ErrExists otherwise.
	Dest string
	// Source is the baseline: a Btrfs subvolume (btrfs), the lower
	// directory (overlay) or the directory to copy (copy). It is
	// borrowed: nothing in this package writes to or deletes it.
	Source string
	// Reflink selects how copy clones file data; the other kinds ignore
	// it.
	Reflink ReflinkMode
}

// Tree is the record of one prepared private tree: what a caller persists
// after Prepare and hands back to Mounts, Verify and Remove, possibly in
// another process after a crash or a reboot. It serialises to JSON.
type Tree struct {
	Kind Kind `json:"kind"`
	// Dest is the owned directory that holds everything Prepare made.
	Dest   string `json:"dest"`
	DestID FileID `json:"dest_id"`
	// Path is the host-side directory holding the tree's own data:
	// the snapshot or the copy, or, for overlay, the upper (which holds
	// only the changes; the merged tree exists only in a view).
	Path string `json:"path"`

	Btrfs   *BtrfsTree   `json:"btrfs,omitempty"`
	Overlay *OverlayTree `json:"overlay,omitempty"`
	Copy    *CopyTree    `json:"copy,omitempty"`
}

// BtrfsTree is the identity of a snapshot.
type BtrfsTree struct {
	// Source is the baseline subvolume the snapshot was taken of and
	// SourceID/SourceUUID its identity at that time. The snapshot stays
	// readable after the baseline is deleted.
	Source     string `json:"source"`
	SourceID   uint64 `json:"source_subvolume_id"`
	SourceUUID string `json:"source_uuid,omitempty"`
	// SubvolumeID is the snapshot's subvolume (tree) id, UUID its
	// subvolume UUID (empty on kernels without BTRFS_IOC_GET_SUBVOL_INFO),
	// Root the identity of its root directory (inode 256).
	SubvolumeID uint64 `json:"subvolume_id"`
	UUID        string `json:"uuid,omitempty"`
	Root        FileID `json:"root"`
}

// OverlayTree is the identity of an overlay's owned and borrowed parts.
type OverlayTree struct {
	// Lower is borrowed and never deleted; LowerID is checked before the
	// view is (re)built, since reopening the tree needs the same lower.
	Lower   string `json:"lower"`
	LowerID FileID `json:"lower_id"`
	Upper   string `json:"upper"`
	UpperID FileID `json:"upper_id"`
	Work    string `json:"work"`
	WorkID  FileID `json:"work_id"`
}

// CopyTree is the identity of a copy and how it was made.
type CopyTree struct {
	Source string `json:"source"`
	Dir    string `json:"dir"`
	DirID  FileID `json:"dir_id"`
	// Reflink says whether every regular file's data was cloned.
	Reflink ReflinkResult `json:"reflink"`
	Files   int64         `json:"files"` // regular files copied or cloned
	Cloned  int64         `json:"cloned"`
	Bytes   int64         `json:"bytes"` // apparent size of those files
}

// Backend is one tree mechanism. Implementations are safe for concurrent
// use on different destinations.
type Backend interface {
	// Kind names the mechanism.
	Kind() Kind
	// Prepare allocates a tree inside req.Dest, which it creates
	// exclusively (ErrExists if it is already there). On failure it
	// removes what it made and nothing else.
	Prepare(ctx context.Context, req Request) (Tree, error)
	// Mounts describes how to present the tree at a target, as data:
	// a bind of the tree directory, or an overlay. It reads nothing
	// from the filesystem; call Verify first when the record is old.
	Mounts(t Tree) ([]Mount, error)
	// Verify checks that every recorded part of t is still the recorded
	// object (ErrIdentityMismatch otherwise), including a borrowed
	// overlay lower.
	Verify(ctx context.Context, t Tree) error
	// Remove deletes what Prepare made for t. It is idempotent (a tree
	// already gone is success), refuses with ErrIdentityMismatch when a
	// path holds something else than recorded, and never deletes a
	// borrowed baseline or lower.
	Remove(ctx context.Context, t Tree) error
}

// ForKind returns the backend for k.
func ForKind(k Kind) (Backend, error) {
	switch k {
	case KindBtrfs:
		return Btrfs{}, nil
	case KindOverlay:
		return Overlay{}, nil
	case KindCopy:
		return Copy{}, nil
	}
	return nil, fmt.Errorf("tree kind %q: %w", k, ErrUnsupportedKind)
}

// Reopen verifies a recorded tree and returns the mounts that present it
// again, for example to rebuild an overlay view from its recorded lower and
// upper after the keeper is gone, for export.
func Reopen(ctx context.Context, t Tree) ([]Mount, error) {
	b, err := ForKind(t.Kind)
	if err != nil {
		return nil, err
	}
	if err := b.Verify(ctx, t); err != nil {
		return nil, fmt.Errorf("reopening %s tree %s: %w", t.Kind, t.Dest, err)
	}
	return b.Mounts(t)
}

// checkRequest validates the shape of req.
func checkRequest(k Kind, req Request) error {
	if req.Dest == "" || !filepath.IsAbs(req.Dest) || filepath.Clean(req.Dest) != req.Dest {
		return fmt.Errorf("%s tree: destination %q must be a clean absolute path: %w", k, req.Dest, ErrInvalidRequest)
	}
	if req.Source == "" || !filepath.IsAbs(req.Source) {
		return fmt.Errorf("%s tree: source %q must be an absolute path: %w", k, req.Source, ErrInvalidRequest)
	}
	return nil
}

// checkNoOverlap rejects a destination inside the source or a source
// inside the destination, on resolved paths.
func checkNoOverlap(k Kind, source, dest string) error {
	src, err := filepath.EvalSymlinks(source)
	if err != nil {
		return fmt.Errorf("%s tree: resolving source: %w", k, err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(dest))
	if err != nil {
		return fmt.Errorf("%s tree: resolving the destination's parent: %w", k, err)
	}
	d := filepath.Join(parent, filepath.Base(dest))
	if within(src, d) || within(d, src) {
		return fmt.Errorf("%s tree: destination %s and source %s overlap: %w", k, dest, source, ErrInvalidRequest)
	}
	return nil
}

// makeDest creates the owned destination directory exclusively.
func makeDest(k Kind, dest string) (FileID, error) {
	if err := ignoringEINTR(func() error { return unix.Mkdir(dest, 0o700) }); err != nil {
		if err == unix.EEXIST {
			return FileID{}, fmt.Errorf("preparing %s tree at %s: %w", k, dest, ErrExists)
		}
		return FileID{}, fmt.Errorf("preparing %s tree: %w", k, &os.PathError{Op: "mkdir", Path: dest, Err: err})
	}
	id, _, err := statID(dest)
	if err != nil {
		_ = os.Remove(dest)
		return FileID{}, fmt.Errorf("preparing %s tree: %w", k, err)
	}
	return id, nil
}

// checkTree validates the common part of a record handed to backend k.
func checkTree(k Kind, t Tree) error {
	if t.Kind != k {
		return fmt.Errorf("%s backend given a %q tree: %w", k, t.Kind, ErrWrongKind)
	}
	if t.Dest == "" || !filepath.IsAbs(t.Dest) || t.DestID.Ino == 0 {
		return fmt.Errorf("%s tree record without a destination identity: %w", k, ErrInvalidRequest)
	}
	return nil
}

// removeDest removes the (now empty) destination after checking it is
// still the recorded directory. A missing destination is success.
func removeDest(t Tree) error {
	if err := checkID("destination", t.Dest, t.DestID); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := ignoringEINTR(func() error { return unix.Rmdir(t.Dest) }); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: t.Dest, Err: err}
	}
	return nil
}
