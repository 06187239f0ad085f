package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// FileID identifies a file or directory independently of its path; it is
// safefs.FileID (device, inode and, where the filesystem has one, f_fsid).
type FileID = safefs.FileID

// openPart opens the recorded directory name below parent (no symbolic
// links) and checks that it is want. What is there instead, a symbolic
// link or another object, is ErrIdentityMismatch; a missing name matches
// fs.ErrNotExist.
func openPart(parent *safefs.Dir, name, what string, want FileID) (*safefs.Dir, error) {
	p := filepath.Join(parent.Path(), name)
	d, err := parent.OpenDir(name)
	if err != nil {
		if errors.Is(err, safefs.ErrSymlink) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%s %s is no longer the recorded directory: %w: %w", what, p, err, ErrIdentityMismatch)
		}
		return nil, err
	}
	if got := d.ID(); !got.Same(want) {
		d.Close()
		return nil, fmt.Errorf("%s %s is now %v, recorded %v: %w", what, p, got, want, ErrIdentityMismatch)
	}
	return d, nil
}

// openDest opens the parent of t.Dest without following symbolic links,
// then t.Dest itself, checked against t.DestID. A missing destination (or
// parent) matches fs.ErrNotExist.
func openDest(t Tree) (parent, dest *safefs.Dir, err error) {
	parent, err = safefs.OpenDir(filepath.Dir(t.Dest))
	if err != nil {
		if errors.Is(err, safefs.ErrSymlink) {
			return nil, nil, fmt.Errorf("destination %s: %w: %w", t.Dest, err, ErrIdentityMismatch)
		}
		return nil, nil, err
	}
	dest, err = openPart(parent, filepath.Base(t.Dest), "destination", t.DestID)
	if err != nil {
		parent.Close()
		return nil, nil, err
	}
	return parent, dest, nil
}

// removeDest removes t.Dest and everything still in it, by descriptors,
// after checking it is the recorded directory (safefs.RemoveTree). A
// missing destination is success.
func removeDest(parent *safefs.Dir, t Tree) error {
	err := parent.RemoveTree(filepath.Base(t.Dest), t.DestID)
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, safefs.ErrCrossesMount):
		return fmt.Errorf("%w: %w", err, ErrBusy)
	}
	return err
}

// isBelow reports whether the directory d is anc or below it, walking up
// ".." from d's descriptor (so bind mounts and symbolic links on d's path
// don't hide it).
func isBelow(d *safefs.Dir, anc FileID) (bool, error) {
	fd, err := unix.Openat(d.Fd(), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &os.PathError{Op: "open", Path: d.Path(), Err: err}
	}
	defer func() { unix.Close(fd) }()
	for range 4096 {
		var st unix.Stat_t
		if err := linux.IgnoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
			return false, &os.PathError{Op: "fstat", Path: d.Path(), Err: err}
		}
		if st.Dev == anc.Dev && st.Ino == anc.Ino {
			return true, nil
		}
		up, err := linux.IgnoringEINTR2(func() (int, error) {
			return unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		})
		if err != nil {
			return false, &os.PathError{Op: "open", Path: d.Path() + "/..", Err: err}
		}
		var ust unix.Stat_t
		if err := linux.IgnoringEINTR(func() error { return unix.Fstat(up, &ust) }); err != nil {
			unix.Close(up)
			return false, &os.PathError{Op: "fstat", Path: d.Path() + "/..", Err: err}
		}
		unix.Close(fd)
		fd = up
		if ust.Dev == st.Dev && ust.Ino == st.Ino {
			return false, nil // the root: ".." is itself
		}
	}
	return false, fmt.Errorf("%s: more than 4096 levels deep", d.Path())
}

// mountsUnder lists the mount points in this mount namespace at or below
// dir, from /proc/self/mountinfo. Removal checks it before deleting
// anything; safefs.RemoveTree refuses to cross a mount anyway.
func mountsUnder(dir string) ([]string, error) {
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) { return !safefs.Within(dir, m.Mountpoint), false })
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// removeTree removes t's destination and everything in it, the one way
// for every mechanism: the record is checked (check); a missing
// destination is success; before anything is deleted, the parts still
// below the destination must be the recorded ones (verify) and nothing may
// be mounted there; destroy (when given) then deletes what removeDest
// can't. Errors after check say "removing KIND tree".
func removeTree(ctx context.Context, t Tree, check func(Tree) error, verify, destroy func(dest *safefs.Dir) error) error {
	if err := check(t); err != nil {
		return err
	}
	err := func() error {
		parent, dest, err := openDest(t)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer parent.Close()
		defer dest.Close()
		if err := verify(dest); err != nil {
			return err
		}
		if err := refuseMounts(t.Dest); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if destroy != nil {
			if err := destroy(dest); err != nil {
				return err
			}
		}
		return removeDest(parent, t)
	}()
	if err != nil {
		return fmt.Errorf("removing %s tree: %w", t.Kind, err)
	}
	return nil
}

// part is an owned directory below a destination, as recorded.
type part struct {
	what, name string
	id         FileID
}

// partsThere checks that each part still below dest is the recorded one
// (a missing one is fine: removed earlier).
func partsThere(dest *safefs.Dir, parts ...part) error {
	for _, p := range parts {
		d, err := openPart(dest, p.name, p.what, p.id)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		d.Close()
	}
	return nil
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
