package storage

import (
	"github.com/moby/sys/mountinfo"

	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// FileID identifies a file or directory independently of its path.
//
// Dev and Ino are st_dev and st_ino. FSID is statfs' f_fsid, which disk
// filesystems derive from their UUID (Btrfs also mixes in the subvolume
// id), so it survives a remount, while st_dev on Btrfs is an anonymous
// per-subvolume number that can change at the next mount. Same therefore
// compares FSID when one was recorded and falls back to Dev otherwise.
type FileID struct {
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	FSID uint64 `json:"fsid,omitempty"`
}

// Same reports whether a and b name the same object.
func (a FileID) Same(b FileID) bool {
	if a.Ino != b.Ino || a.Ino == 0 {
		return false
	}
	if a.FSID != 0 || b.FSID != 0 {
		return a.FSID == b.FSID
	}
	return a.Dev == b.Dev
}

func (a FileID) String() string {
	return fmt.Sprintf("dev %d ino %d fsid %016x", a.Dev, a.Ino, a.FSID)
}

// statID returns the identity of path without following a final symlink,
// and its lstat result.
func statID(path string) (FileID, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Lstat(path, &st) }); err != nil {
		return FileID{}, st, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	id := FileID{Dev: st.Dev, Ino: st.Ino}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		// statfs follows symlinks; only ask it about directories, which
		// lstat just said path is.
		var sf unix.Statfs_t
		if err := ignoringEINTR(func() error { return unix.Statfs(path, &sf) }); err != nil {
			return FileID{}, st, &os.PathError{Op: "statfs", Path: path, Err: err}
		}
		id.FSID = uint64(uint32(sf.Fsid.Val[0]))<<32 | uint64(uint32(sf.Fsid.Val[1]))
	}
	return id, st, nil
}

// dirID is statID for a path that must be a directory.
func dirID(path string) (FileID, unix.Stat_t, error) {
	id, st, err := statID(path)
	if err != nil {
		return id, st, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return id, st, &os.PathError{Op: "stat", Path: path, Err: unix.ENOTDIR}
	}
	return id, st, nil
}

// checkID verifies that path still holds want. A missing path gives an
// error matching fs.ErrNotExist.
func checkID(what, path string, want FileID) error {
	got, _, err := statID(path)
	if err != nil {
		return err
	}
	if !got.Same(want) {
		return fmt.Errorf("%s %s is now %v, recorded %v: %w", what, path, got, want, ErrIdentityMismatch)
	}
	return nil
}

// mountsUnder lists the mount points in this mount namespace at or below
// dir. Removal refuses to recurse into a mounted filesystem.
func mountsUnder(dir string) ([]string, error) {
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !within(dir, m.Mountpoint), false
	})
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// within reports whether p is dir or below it. Both must be clean and
// absolute.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// refuseMounts fails with ErrBusy when anything is mounted at or below dir.
func refuseMounts(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return fmt.Errorf("%s: %q is mounted inside; unmount it first: %w", dir, mps[0], ErrBusy)
	}
	return nil
}
