package storage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/habemus-papadum/hostfork/internal/safefs"
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
	// must be absolute and must not exist; its parent must, and must be a
	// private allocation area (see PoolDir): reached without symbolic
	// links, owned by this user or root, writable by nobody else. Prepare
	// creates Dest exclusively and fails with ErrExists otherwise.
	Dest string
	// Source is the baseline: a Btrfs subvolume (btrfs), the lower
	// directory (overlay) or the directory to copy (copy). It is
	// borrowed: nothing in this package writes to or deletes it.
	Source string
	// Reflink selects how copy clones file data; the other kinds ignore
	// it.
	Reflink ReflinkMode
	// Pool, if set, is the opened allocation area (from PoolDir) and Dest
	// must be directly in it: Prepare then creates Dest relative to this
	// descriptor instead of opening filepath.Dir(Dest) again. Prepare
	// doesn't close it.
	Pool *safefs.Dir
	// SourceID, if set, is the identity the source must have when
	// Prepare opens it (safefs.OpenSource): the caller's earlier look at
	// it (the plan) must have seen the same directory.
	SourceID *safefs.FileID
	// Ref and Branch are for worktree: the commit-ish to check out
	// (default HEAD) and the new branch made for it (default
	// hostfork/<base name of Dest>).
	Ref, Branch string
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

	Btrfs    *BtrfsTree    `json:"btrfs,omitempty"`
	Overlay  *OverlayTree  `json:"overlay,omitempty"`
	Copy     *CopyTree     `json:"copy,omitempty"`
	Worktree *WorktreeTree `json:"worktree,omitempty"`
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
	// UpperCopy, on a fork's tree, says how the parent's upper was copied
	// into this one (cloned or copied; Fork).
	UpperCopy *CopyTree `json:"upper_copy,omitempty"`
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
	// Open verifies t like Verify and keeps its parts open, so that it is
	// mounted through those descriptors, never by path again.
	Open(ctx context.Context, t Tree) (*Opened, error)
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
	case KindWorktree:
		return Worktree{}, nil
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
	if req.Dest == "" || !filepath.IsAbs(req.Dest) || filepath.Clean(req.Dest) != req.Dest || req.Dest == "/" {
		return fmt.Errorf("%s tree: destination %q must be a clean absolute path: %w", k, req.Dest, ErrInvalidRequest)
	}
	if req.Source == "" || !filepath.IsAbs(req.Source) {
		return fmt.Errorf("%s tree: source %q must be an absolute path: %w", k, req.Source, ErrInvalidRequest)
	}
	if req.Pool != nil && req.Pool.Path() != filepath.Dir(req.Dest) {
		return fmt.Errorf("%s tree: destination %s is not directly in the pool %s: %w", k, req.Dest, req.Pool.Path(), ErrInvalidRequest)
	}
	return nil
}

// openSource opens req.Source once, by descriptors (safefs.OpenSource),
// and checks it against req.SourceID: the descriptor is then what is
// copied, snapshotted or mounted.
func openSource(k Kind, req Request) (*safefs.Dir, error) {
	d, err := safefs.OpenSource(req.Source)
	if err != nil {
		return nil, fmt.Errorf("preparing %s tree: the source must be an existing directory: %w", k, err)
	}
	if req.SourceID != nil && !d.ID().Same(*req.SourceID) {
		d.Close()
		return nil, fmt.Errorf("preparing %s tree: the source %s is no longer the directory planned (%v, planned %v): %w", k, req.Source, d.ID(), *req.SourceID, ErrIdentityMismatch)
	}
	return d, nil
}

// PoolDir opens the allocation area name (one component) in the
// directory parent, creating it with mode 0700 if it doesn't exist, and
// returns it for Request.Pool; the caller closes it. parent is opened
// without following a symbolic link in any component; it may belong to
// someone else (the owner of a baseline's directory), but the area itself
// must be a real directory owned by this user or root that its group and
// others can't write (safefs.EnsurePrivateDir): a symbolic link, another
// user's directory or a writable one planted under that name is refused
// with an error matching safefs.ErrSymlink or safefs.ErrUntrusted that
// says what to remove, and nothing is written through it. The engine
// allocates <store>/trees and <dirname(baseline)>/.hostfork-trees with it.
func PoolDir(parent, name string) (*safefs.Dir, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("allocation area %q in %s: one name is needed: %w", name, parent, ErrInvalidRequest)
	}
	p, err := safefs.OpenDir(parent)
	if err != nil {
		return nil, fmt.Errorf("opening the allocation area %s: %w", filepath.Join(parent, name), err)
	}
	defer p.Close()
	pool, err := p.EnsurePrivateDir(name, 0o700)
	if err != nil {
		return nil, fmt.Errorf("allocation area: %w", err)
	}
	return pool, nil
}

// destParent opens the directory req.Dest is allocated in: a descriptor
// of its own on req.Pool, or filepath.Dir(req.Dest) opened without
// following symbolic links. Either way it must be private: a directory
// others can write lets them swap the tree's names under the record.
func destParent(k Kind, req Request) (*safefs.Dir, error) {
	var parent *safefs.Dir
	var err error
	if req.Pool != nil {
		parent, err = req.Pool.OpenDir(".")
	} else {
		parent, err = safefs.OpenDir(filepath.Dir(req.Dest))
	}
	if err != nil {
		return nil, fmt.Errorf("preparing %s tree at %s: opening its parent: %w", k, req.Dest, err)
	}
	if err := parent.CheckPrivate(); err != nil {
		parent.Close()
		return nil, fmt.Errorf("preparing %s tree at %s: its parent must be a private allocation area (see PoolDir): %w", k, req.Dest, err)
	}
	return parent, nil
}

// checkNoOverlap rejects a destination whose parent is the source or below
// it, by identity. (The destination is new, so the source can't be below
// it.)
func checkNoOverlap(k Kind, source, parent *safefs.Dir, dest string) error {
	below, err := isBelow(parent, source.ID())
	if err != nil {
		return fmt.Errorf("%s tree: %w", k, err)
	}
	if below {
		return fmt.Errorf("%s tree: destination %s is inside the source %s: %w", k, dest, source.Path(), ErrInvalidRequest)
	}
	return nil
}

// newDest opens the directory req.Dest is allocated in (destParent), runs
// check on it (nil: none), refuses a destination inside src
// (checkNoOverlap) and creates the owned destination exclusively. The
// caller closes both.
func newDest(k Kind, req Request, src *safefs.Dir, check func(parent *safefs.Dir) error) (parent, dest *safefs.Dir, err error) {
	if parent, err = destParent(k, req); err != nil {
		return nil, nil, err
	}
	if check != nil {
		err = check(parent)
	}
	if err == nil {
		err = checkNoOverlap(k, src, parent, req.Dest)
	}
	if err == nil {
		dest, err = parent.MkdirExclusive(filepath.Base(req.Dest), 0o700)
		if errors.Is(err, safefs.ErrExists) {
			err = fmt.Errorf("preparing %s tree at %s: %w", k, req.Dest, ErrExists)
		} else if err != nil {
			err = fmt.Errorf("preparing %s tree: %w", k, err)
		}
	}
	if err != nil {
		parent.Close()
		return nil, nil, err
	}
	return parent, dest, nil
}

// checkTree validates the common part of a record handed to backend k.
func checkTree(k Kind, t Tree) error {
	if t.Kind != k {
		return fmt.Errorf("%s backend given a %q tree: %w", k, t.Kind, ErrWrongKind)
	}
	if t.Dest == "" || !filepath.IsAbs(t.Dest) || filepath.Clean(t.Dest) != t.Dest || t.Dest == "/" || t.DestID.Ino == 0 {
		return fmt.Errorf("%s tree record without a destination identity: %w", k, ErrInvalidRequest)
	}
	return nil
}
