package storage

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// Btrfs is the snapshot backend: Prepare takes a writable snapshot of a
// baseline subvolume with BTRFS_IOC_SNAP_CREATE_V2 at Dest/tree, which must
// be on the same Btrfs filesystem. The snapshot does not depend on the
// baseline: it stays readable after the baseline is deleted. Nested
// subvolumes of the baseline are not part of the snapshot (they appear as
// empty directories) and must be described as trees of their own.
type Btrfs struct{}

var _ Backend = Btrfs{}

// Kind returns KindBtrfs.
func (Btrfs) Kind() Kind { return KindBtrfs }

// Subvolume is the identity of a Btrfs subvolume.
type Subvolume struct {
	ID   uint64 `json:"id"`             // subvolume (tree) id
	UUID string `json:"uuid,omitempty"` // empty before Linux 4.18
	Root FileID `json:"root"`           // its root directory, inode 256
}

// InspectSubvolume returns the identity of the subvolume whose root is
// path (opened following symbolic links on the way, not a final one). It
// fails with ErrNotBtrfs or ErrNotSubvolume when path is not one.
func InspectSubvolume(path string) (Subvolume, error) {
	d, err := safefs.OpenDirFollowing(path)
	if err != nil {
		return Subvolume{}, err
	}
	defer d.Close()
	return inspectSubvolumeFd(path, d.Fd())
}

func inspectSubvolumeFd(path string, fd int) (Subvolume, error) {
	var sf unix.Statfs_t
	if err := linux.IgnoringEINTR(func() error { return unix.Fstatfs(fd, &sf) }); err != nil {
		return Subvolume{}, &os.PathError{Op: "fstatfs", Path: path, Err: err}
	}
	if uint32(sf.Type) != unix.BTRFS_SUPER_MAGIC {
		return Subvolume{}, fmt.Errorf("%s: filesystem type %#x: %w", path, uint32(sf.Type), ErrNotBtrfs)
	}
	var st unix.Stat_t
	if err := linux.IgnoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return Subvolume{}, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Ino != btrfsFirstFreeObjectID {
		return Subvolume{}, fmt.Errorf("%s is a directory inside a subvolume, not a subvolume's root (inode %d): %w", path, st.Ino, ErrNotSubvolume)
	}
	sv := Subvolume{Root: FileID{
		Dev:  st.Dev,
		Ino:  st.Ino,
		FSID: uint64(uint32(sf.Fsid.Val[0]))<<32 | uint64(uint32(sf.Fsid.Val[1])),
	}}
	// With tree id 0 and the subvolume root's object id, INO_LOOKUP
	// returns the tree id of fd's subvolume; this form needs no privilege.
	lk := btrfsInoLookupArgs{ObjectID: btrfsFirstFreeObjectID}
	if err := ioctlPtr(fd, btrfsIocInoLookup, unsafe.Pointer(&lk)); err != nil {
		return Subvolume{}, &os.PathError{Op: "ioctl BTRFS_IOC_INO_LOOKUP", Path: path, Err: err}
	}
	sv.ID = lk.TreeID
	var info btrfsGetSubvolInfoArgs
	switch err := ioctlPtr(fd, btrfsIocGetSubvolInfo, unsafe.Pointer(&info)); {
	case err == nil:
		if info.TreeID != sv.ID {
			return Subvolume{}, fmt.Errorf("%s: subvolume id %d from INO_LOOKUP, %d from GET_SUBVOL_INFO: %w", path, sv.ID, info.TreeID, ErrIdentityMismatch)
		}
		sv.UUID = formatUUID(info.UUID)
	case errors.Is(err, unix.ENOTTY):
		// Before Linux 4.18: identity rests on the id and root FileID.
	default:
		return Subvolume{}, &os.PathError{Op: "ioctl BTRFS_IOC_GET_SUBVOL_INFO", Path: path, Err: err}
	}
	return sv, nil
}

// Same reports whether s and o are the same subvolume: same id, same root
// identity, and the same UUID where both have one.
func (s Subvolume) Same(o Subvolume) bool {
	if s.ID != o.ID || !s.Root.Same(o.Root) {
		return false
	}
	return s.UUID == "" || o.UUID == "" || s.UUID == o.UUID
}

func formatUUID(u [btrfsUUIDSize]byte) string {
	var zero [btrfsUUIDSize]byte
	if u == zero {
		return ""
	}
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// CreateSubvolume creates an empty subvolume at path, exclusively, in its
// parent directory opened without following symbolic links. It is host
// preparation (a baseline, a doctor probe, a test), never part of
// launching an environment.
func CreateSubvolume(path string) error {
	parent, name := filepath.Split(filepath.Clean(path))
	if len(name) > btrfsPathNameMax {
		return &os.PathError{Op: "create subvolume", Path: path, Err: unix.ENAMETOOLONG}
	}
	d, err := safefs.OpenDir(parent)
	if err != nil {
		return fmt.Errorf("creating subvolume %s: %w", path, err)
	}
	defer d.Close()
	var args btrfsVolArgs
	copy(args.Name[:], name)
	if err := ioctlPtr(d.Fd(), btrfsIocSubvolCreate, unsafe.Pointer(&args)); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("creating subvolume %s: %w", path, ErrExists)
		}
		if errors.Is(err, unix.ENOTTY) {
			return fmt.Errorf("creating subvolume %s: %w", path, ErrNotBtrfs)
		}
		return &os.PathError{Op: "ioctl BTRFS_IOC_SUBVOL_CREATE", Path: path, Err: err}
	}
	return nil
}

// Prepare snapshots req.Source, a subvolume, at req.Dest/tree.
func (Btrfs) Prepare(ctx context.Context, req Request) (Tree, error) {
	if err := checkRequest(KindBtrfs, req); err != nil {
		return Tree{}, err
	}
	if err := ctx.Err(); err != nil {
		return Tree{}, fmt.Errorf("preparing btrfs tree: %w", err)
	}
	srcDir, err := openSource(KindBtrfs, req)
	if err != nil {
		return Tree{}, err
	}
	defer srcDir.Close()
	src, err := inspectSubvolumeFd(req.Source, srcDir.Fd())
	if err != nil {
		return Tree{}, fmt.Errorf("preparing btrfs tree: the baseline must be a btrfs subvolume: %w", err)
	}
	parent, dest, err := newDest(KindBtrfs, req, srcDir, func(parent *safefs.Dir) error {
		var sf unix.Statfs_t
		if err := linux.IgnoringEINTR(func() error { return unix.Fstatfs(parent.Fd(), &sf) }); err != nil {
			return fmt.Errorf("preparing btrfs tree: %w", &os.PathError{Op: "fstatfs", Path: parent.Path(), Err: err})
		}
		if uint32(sf.Type) != unix.BTRFS_SUPER_MAGIC {
			return fmt.Errorf("preparing btrfs tree: destination parent %s: %w", parent.Path(), ErrNotBtrfs)
		}
		return nil
	})
	if err != nil {
		return Tree{}, err
	}
	defer parent.Close()
	defer dest.Close()
	t := Tree{Kind: KindBtrfs, Dest: req.Dest, DestID: dest.ID(), Path: filepath.Join(req.Dest, treeDirName)}
	args := btrfsVolArgsV2{Fd: int64(srcDir.Fd())}
	copy(args.Name[:], treeDirName)
	if err := ioctlPtr(dest.Fd(), btrfsIocSnapCreateV2, unsafe.Pointer(&args)); err != nil {
		perr := &os.PathError{Op: "ioctl BTRFS_IOC_SNAP_CREATE_V2", Path: t.Path, Err: err}
		if rerr := removeDest(parent, t); rerr != nil {
			perr.Err = errors.Join(err, rerr)
		}
		if errors.Is(err, unix.EXDEV) {
			return Tree{}, fmt.Errorf("snapshotting %s: %w: %w", req.Source, perr, ErrCrossFilesystem)
		}
		return Tree{}, fmt.Errorf("snapshotting %s: %w", req.Source, perr)
	}
	snap, err := inspectAt(dest, treeDirName)
	if err != nil {
		rerr := destroySubvolume(dest.Fd(), t.Path, treeDirName, 0)
		if rerr == nil {
			rerr = removeDest(parent, t)
		}
		return Tree{}, errors.Join(fmt.Errorf("reading the new snapshot's identity: %w", err), rerr)
	}
	t.Btrfs = &BtrfsTree{
		Source:      req.Source,
		SourceID:    src.ID,
		SourceUUID:  src.UUID,
		SubvolumeID: snap.ID,
		UUID:        snap.UUID,
		Root:        snap.Root,
	}
	return t, nil
}

// inspectAt is InspectSubvolume of name in d, opened without following
// symbolic links.
func inspectAt(d *safefs.Dir, name string) (Subvolume, error) {
	sd, err := d.OpenDir(name)
	if err != nil {
		return Subvolume{}, err
	}
	defer sd.Close()
	return inspectSubvolumeFd(sd.Path(), sd.Fd())
}

func (Btrfs) check(t Tree) error {
	if err := checkTree(KindBtrfs, t); err != nil {
		return err
	}
	if t.Btrfs == nil || t.Btrfs.SubvolumeID == 0 || t.Path != filepath.Join(t.Dest, treeDirName) {
		return fmt.Errorf("btrfs tree record at %s is incomplete: %w", t.Dest, ErrInvalidRequest)
	}
	if bt := t.Btrfs; bt.SubvolumeID == bt.SourceID || (bt.UUID != "" && bt.UUID == bt.SourceUUID) {
		return fmt.Errorf("btrfs tree record at %s names its baseline as the snapshot: %w", t.Dest, ErrIdentityMismatch)
	}
	return nil
}

func (t *BtrfsTree) subvolume() Subvolume {
	return Subvolume{ID: t.SubvolumeID, UUID: t.UUID, Root: t.Root}
}

// verifySnapshot checks that fd (opened on t.Path) is the recorded snapshot.
func verifySnapshot(t Tree, fd int) error {
	got, err := inspectSubvolumeFd(t.Path, fd)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w: %w", t.Path, err, ErrIdentityMismatch)
	}
	if want := t.Btrfs.subvolume(); !got.Same(want) {
		return fmt.Errorf("snapshot %s is now subvolume %d (uuid %s), recorded %d (uuid %s): %w",
			t.Path, got.ID, got.UUID, want.ID, want.UUID, ErrIdentityMismatch)
	}
	return nil
}

// Mounts returns a bind mount of the snapshot.
func (b Btrfs) Mounts(t Tree) ([]Mount, error) {
	if err := b.check(t); err != nil {
		return nil, err
	}
	return []Mount{{Type: "bind", Source: t.Path, Options: []string{"bind"}}}, nil
}

// Verify checks the destination and the snapshot's subvolume identity.
func (b Btrfs) Verify(ctx context.Context, t Tree) error { return closed(b.Open(ctx, t)) }

// Remove destroys the snapshot by its recorded subvolume id, relative to
// the verified destination's descriptor, and removes the destination. The
// baseline is never touched.
func (b Btrfs) Remove(ctx context.Context, t Tree) error {
	there := false // the snapshot is still there (not destroyed earlier)
	return removeTree(ctx, t, b.check, func(dest *safefs.Dir) error {
		snap, err := dest.OpenDir(treeDirName)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// Destroyed earlier; only the destination is left.
			return nil
		case errors.Is(err, safefs.ErrSymlink):
			return fmt.Errorf("snapshot %s: %w: %w", t.Path, err, ErrIdentityMismatch)
		case err != nil:
			return err
		}
		defer snap.Close()
		there = true
		return verifySnapshot(t, snap.Fd())
	}, func(dest *safefs.Dir) error {
		if !there {
			return nil
		}
		return destroySubvolume(dest.Fd(), t.Path, treeDirName, t.Btrfs.SubvolumeID)
	})
}

// destroySubvolume deletes the subvolume named name in the directory
// parentFd. With id != 0 it names the subvolume by id
// (BTRFS_IOC_SNAP_DESTROY_V2, BTRFS_SUBVOL_SPEC_BY_ID), so exactly the
// verified subvolume goes even if the name was swapped meanwhile; kernels
// before 5.7 fall back to BTRFS_IOC_SNAP_DESTROY by name.
func destroySubvolume(parentFd int, path, name string, id uint64) error {
	op := "ioctl BTRFS_IOC_SNAP_DESTROY_V2"
	var err error
	if id != 0 {
		args := btrfsVolArgsV2{Flags: btrfsSubvolSpecByID}
		*(*uint64)(unsafe.Pointer(&args.Name[0])) = id
		err = ioctlPtr(parentFd, btrfsIocSnapDestroyV2, unsafe.Pointer(&args))
	}
	if id == 0 || errors.Is(err, unix.ENOTTY) {
		op = "ioctl BTRFS_IOC_SNAP_DESTROY"
		var args btrfsVolArgs
		copy(args.Name[:], name)
		err = ioctlPtr(parentFd, btrfsIocSnapDestroy, unsafe.Pointer(&args))
	}
	if err == nil {
		return nil
	}
	perr := &os.PathError{Op: op, Path: path, Err: err}
	if errors.Is(err, unix.EPERM) && os.Geteuid() != 0 {
		return fmt.Errorf("%w: %w", perr, ErrRemoveNotPermitted)
	}
	return perr
}
