package safefs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// RemoveTree removes the directory name (one component) in d and
// everything below it, by descriptors only. It opens name with
// O_NOFOLLOW and refuses with ErrIdentityMismatch, deleting nothing,
// unless it is the directory want names. It then walks with openat,
// getdents and unlinkat relative to each directory's descriptor: a
// symbolic link is unlinked, never followed; a directory on another mount
// (a mount point, bind mounts included) or another filesystem is refused
// with ErrCrossesMount and nothing below it is touched (what was removed
// before the walk met it stays removed: callers that want all or nothing
// check the mount table first). A Btrfs subvolume inside, on the same
// mount, is the same filesystem and is removed like a directory. Last, it
// removes name itself after checking that name still holds the same
// inode.
//
// Entries renamed into or out of the tree while it runs, by someone who
// can write its directories, are removed or left where they went; nothing
// is ever reached outside the tree's own directories. A missing name
// gives an error matching fs.ErrNotExist.
func (d *Dir) RemoveTree(name string, want FileID) error {
	if err := checkName(d, name); err != nil {
		return err
	}
	full := d.join(name)
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	switch {
	case err == unix.ELOOP || err == unix.ENOTDIR:
		return fmt.Errorf("removing %s: it is no longer the recorded directory (%v), it is not a directory: %w", full, want, ErrIdentityMismatch)
	case err != nil:
		return pathErr("open", full, err)
	}
	defer unix.Close(fd)
	st, err := fstat(fd)
	if err != nil {
		return pathErr("fstat", full, err)
	}
	fsid, err := fstatfsID(fd)
	if err != nil {
		return pathErr("fstatfs", full, err)
	}
	if got := (FileID{Dev: st.Dev, Ino: st.Ino, FSID: fsid}); !got.Same(want) {
		return fmt.Errorf("removing %s: it is now %v, recorded %v: %w", full, got, want, ErrIdentityMismatch)
	}
	top, err := statMount(fd, full)
	if err != nil {
		return err
	}
	if err := removeContents(fd, full, top); err != nil {
		return err
	}
	var now unix.Stat_t
	if err := linux.IgnoringEINTR(func() error { return unix.Fstatat(d.fd, name, &now, unix.AT_SYMLINK_NOFOLLOW) }); err != nil {
		return pathErr("lstat", full, err)
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return fmt.Errorf("removing %s: its contents are removed, but the name now holds another object, which is left alone: %w", full, ErrIdentityMismatch)
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR) }); err != nil {
		return pathErr("rmdir", full, err)
	}
	return nil
}

// Remove removes the single entry name (a file, a symbolic link, or an
// empty directory) from d after checking that it is want. The check and
// the unlink are two steps: use it in directories only the caller can
// write.
func (d *Dir) Remove(name string, want FileID) error {
	st, err := d.Lstat(name)
	if err != nil {
		return err
	}
	if got := (FileID{Dev: st.Dev, Ino: st.Ino}); !got.Same(want) {
		return fmt.Errorf("removing %s: it is now %v, recorded %v: %w", d.join(name), got, want, ErrIdentityMismatch)
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Unlinkat(d.fd, name, flags) }); err != nil {
		return pathErr("unlinkat", d.join(name), err)
	}
	return nil
}

// mountPos is where a directory is: its mount and its device.
type mountPos struct {
	mnt uint64 // statx mount id; 0 when the kernel doesn't say
	dev uint64
}

func statMount(fd int, path string) (mountPos, error) {
	var stx unix.Statx_t
	err := linux.IgnoringEINTR(func() error {
		return unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_MNT_ID, &stx)
	})
	if err != nil {
		return mountPos{}, pathErr("statx", path, err)
	}
	p := mountPos{dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor)}
	if stx.Mask&unix.STATX_MNT_ID != 0 {
		p.mnt = stx.Mnt_id
	}
	return p, nil
}

// removeContents empties the directory open as fd. Entries that appear
// while it runs are removed too, a bounded number of times.
func removeContents(fd int, path string, pos mountPos) error {
	for attempt := 0; ; attempt++ {
		names, err := readNames(fd, path)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		if attempt == 16 {
			return pathErr("remove", path, fmt.Errorf("entries keep appearing (%q): %w", names[0], unix.ENOTEMPTY))
		}
		for _, n := range names {
			err := linux.IgnoringEINTR(func() error { return unix.Unlinkat(fd, n, 0) })
			switch err {
			case nil, unix.ENOENT:
			case unix.EISDIR:
				if err := removeDir(fd, path, n, pos); err != nil {
					return err
				}
			default:
				return pathErr("unlinkat", filepath.Join(path, n), err)
			}
		}
	}
}

// removeDir removes the directory name in the directory open as parent,
// if it is on the same mount and filesystem as pos.
func removeDir(parent int, ppath, name string, pos mountPos) error {
	full := filepath.Join(ppath, name)
	fd, err := openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err == unix.EACCES && grantOwner(parent, name) {
		fd, err = openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	}
	switch {
	case err == unix.ENOENT:
		return nil
	case err == unix.ELOOP || err == unix.ENOTDIR:
		// It was replaced by something else than a directory: the next
		// pass of removeContents unlinks it.
		return nil
	case err != nil:
		return pathErr("open", full, err)
	}
	defer unix.Close(fd)
	here, err := statMount(fd, full)
	if err != nil {
		return err
	}
	if here.mnt != pos.mnt {
		return fmt.Errorf("removing %s: it is a mount point (mount id %d inside mount %d); unmount it first, nothing below it was touched: %w",
			full, here.mnt, pos.mnt, ErrCrossesMount)
	}
	if here.dev != pos.dev {
		if !btrfsSubvolumeRoot(fd) {
			return fmt.Errorf("removing %s: it is on another filesystem (device %d:%d); nothing below it was touched: %w",
				full, unix.Major(here.dev), unix.Minor(here.dev), ErrCrossesMount)
		}
		pos.dev = here.dev
	}
	if err := removeContents(fd, full, pos); err != nil {
		return err
	}
	err = linux.IgnoringEINTR(func() error { return unix.Unlinkat(parent, name, unix.AT_REMOVEDIR) })
	switch err {
	case nil, unix.ENOENT, unix.ENOTEMPTY, unix.EEXIST, unix.ENOTDIR:
		// Something was added meanwhile (ENOTEMPTY), or the name was
		// given to something else than a directory (ENOTDIR): the
		// caller's next pass sees the name again.
		return nil
	}
	return pathErr("rmdir", full, err)
}

// btrfsSubvolumeRoot reports whether fd is the root directory of a Btrfs
// subvolume: its own st_dev, inode 256, on the same mount.
func btrfsSubvolumeRoot(fd int) bool {
	var sf unix.Statfs_t
	if linux.IgnoringEINTR(func() error { return unix.Fstatfs(fd, &sf) }) != nil || uint32(sf.Type) != unix.BTRFS_SUPER_MAGIC {
		return false
	}
	st, err := fstat(fd)
	return err == nil && st.Ino == 256
}

// grantOwner gives this user read, write and search on its own directory
// name in parent that it may not open (mode 000, as overlayfs makes its
// work/work directory: root opens it anyway, its owner without root can't,
// decision 125), and reports whether it did. The entry is opened O_PATH
// without following a link, checked to be a directory this user owns, and
// changed through that descriptor.
func grantOwner(parent int, name string) bool {
	fd, err := openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	st, err := fstat(fd)
	if err != nil || int(st.Uid) != os.Geteuid() {
		return false
	}
	return linux.IgnoringEINTR(func() error {
		return unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), 0o700, 0)
	}) == nil
}
