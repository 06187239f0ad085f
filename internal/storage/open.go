package storage

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// Opened is a tree whose parts were opened by descriptor and checked
// against the record, ready to be presented: its mounts name the parts
// through those descriptors, never by path, so a directory renamed or
// replaced after the check (by whoever can write an allocation area's
// parent) can't redirect a mount.
type Opened struct {
	// Files are the parts, opened O_PATH, in the order the mounts refer
	// to them. The caller passes them to the process that mounts.
	Files  []*os.File
	mounts func(part func(i int) string) []Mount
}

// Mounts describes the tree's mounts with part(i) as the path of Files[i]
// in the mounting process (e.g. "/proc/self/fd/N").
func (o *Opened) Mounts(part func(i int) string) []Mount { return o.mounts(part) }

// Close closes the descriptors.
func (o *Opened) Close() {
	if o == nil {
		return
	}
	for _, f := range o.Files {
		f.Close()
	}
	o.Files = nil
}

// pathFile turns a verified directory into an O_PATH file of its own.
func pathFile(d *safefs.Dir) (*os.File, error) {
	fd, err := unix.Openat(d.Fd(), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopening %s: %w", d.Path(), err)
	}
	return os.NewFile(uintptr(fd), d.Path()), nil
}

// Open opens the snapshot through the verified destination and checks its
// subvolume identity.
func (b Btrfs) Open(ctx context.Context, t Tree) (*Opened, error) {
	return bindOpened(inDest(t, b.check, func(dest *safefs.Dir) (*safefs.Dir, error) {
		snap, err := dest.OpenDir(treeDirName)
		if err != nil {
			if errors.Is(err, safefs.ErrSymlink) {
				return nil, fmt.Errorf("snapshot %s: %w: %w", t.Path, err, ErrIdentityMismatch)
			}
			return nil, err
		}
		if err := verifySnapshot(t, snap.Fd()); err != nil {
			snap.Close()
			return nil, err
		}
		return snap, nil
	}))
}

// closed is a Verify by Open: err, or nil after closing what was opened.
func closed(o *Opened, err error) error {
	o.Close()
	return err
}

// inDest checks t's record with check, then runs open on its verified
// destination (openDest), closed after.
func inDest[T any](t Tree, check func(Tree) error, open func(dest *safefs.Dir) (T, error)) (T, error) {
	var zero T
	if err := check(t); err != nil {
		return zero, err
	}
	parent, dest, err := openDest(t)
	if err != nil {
		return zero, err
	}
	defer parent.Close()
	defer dest.Close()
	return open(dest)
}

// bindOpened presents a verified tree directory (d, or open's error) by a
// bind mount of it; d is closed.
func bindOpened(d *safefs.Dir, err error) (*Opened, error) {
	if err != nil {
		return nil, err
	}
	defer d.Close()
	f, err := pathFile(d)
	if err != nil {
		return nil, err
	}
	return &Opened{Files: []*os.File{f}, mounts: func(part func(int) string) []Mount {
		return []Mount{{Type: "bind", Source: part(0), Options: []string{"bind"}}}
	}}, nil
}

// Open opens the copy through the verified destination.
func (cp Copy) Open(ctx context.Context, t Tree) (*Opened, error) {
	return bindOpened(inDest(t, cp.check, func(dest *safefs.Dir) (*safefs.Dir, error) {
		return openPart(dest, treeDirName, "copy", t.Copy.DirID)
	}))
}

// Open opens upper and work through the verified destination, and the
// borrowed lower checked against its recorded identity.
func (o Overlay) Open(ctx context.Context, t Tree) (*Opened, error) {
	return inDest(t, o.check, func(dest *safefs.Dir) (*Opened, error) {
		op := &Opened{}
		// Upper and work under the destination, then the lower, each as an
		// O_PATH file of its own (parts 0, 1 and 2).
		for _, open := range []func() (*safefs.Dir, error){
			func() (*safefs.Dir, error) { return openPart(dest, upperDirName, "upper", t.Overlay.UpperID) },
			func() (*safefs.Dir, error) { return openPart(dest, workDirName, "work", t.Overlay.WorkID) },
			func() (*safefs.Dir, error) { return openLower(t.Overlay) },
		} {
			d, err := open()
			if err == nil {
				var f *os.File
				f, err = pathFile(d)
				d.Close()
				if err == nil {
					op.Files = append(op.Files, f)
					continue
				}
			}
			op.Close()
			return nil, err
		}
		op.mounts = func(part func(int) string) []Mount {
			opts := []string{
				"lowerdir=" + EscapeOverlayPath(part(2)),
				"upperdir=" + EscapeOverlayPath(part(0)),
				"workdir=" + EscapeOverlayPath(part(1)),
			}
			if RootlessOverlay() {
				opts = append(opts, "userxattr")
			}
			return []Mount{{Type: "overlay", Source: "overlay", Options: opts}}
		}
		return op, nil
	})
}

// RootlessOverlay reports whether overlay trees are mounted in a user
// namespace (a rootless view, decision 125), and so with userxattr: the
// upper's whiteout, opaque and redirect marks are then user.overlay.*
// attributes, which an unprivileged mounter may set (without it, removing
// a lower directory fails with EIO). A store's overlay trees are always
// mounted by its own user, so one tree never mixes the two.
func RootlessOverlay() bool { return os.Geteuid() != 0 }
