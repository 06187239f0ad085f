package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Overlay is the OverlayFS backend: Prepare creates an owned upper and work
// directory in Dest over a borrowed lower directory and records the lower's
// identity, since reopening the tree needs the same lower. The lower must
// stay stable while trees use it; the operator guarantees that, this
// package only detects a replaced lower. Mounting happens in the keeper's
// private mount namespace through Mounts and Mount.Apply.
type Overlay struct{}

var _ Backend = Overlay{}

// Kind returns KindOverlay.
func (Overlay) Kind() Kind { return KindOverlay }

// Prepare makes Dest/upper and Dest/work for an overlay over req.Source.
func (Overlay) Prepare(ctx context.Context, req Request) (Tree, error) {
	if err := checkRequest(KindOverlay, req); err != nil {
		return Tree{}, err
	}
	if err := ctx.Err(); err != nil {
		return Tree{}, fmt.Errorf("preparing overlay tree: %w", err)
	}
	// Record the lower by its resolved path so a later symlink swap can't
	// redirect the view; the identity check catches a replaced directory.
	lower, err := filepath.EvalSymlinks(req.Source)
	if err != nil {
		return Tree{}, fmt.Errorf("preparing overlay tree: the lower must be an existing directory: %w", err)
	}
	lowerID, lowerSt, err := dirID(lower)
	if err != nil {
		return Tree{}, fmt.Errorf("preparing overlay tree: the lower must be an existing directory: %w", err)
	}
	if err := checkNoOverlap(KindOverlay, lower, req.Dest); err != nil {
		return Tree{}, err
	}
	destID, err := makeDest(KindOverlay, req.Dest)
	if err != nil {
		return Tree{}, err
	}
	ov := &OverlayTree{
		Lower:   lower,
		LowerID: lowerID,
		Upper:   filepath.Join(req.Dest, upperDirName),
		Work:    filepath.Join(req.Dest, workDirName),
	}
	fail := func(err error) (Tree, error) {
		_ = os.Remove(ov.Work)
		_ = os.Remove(ov.Upper)
		_ = os.Remove(req.Dest)
		return Tree{}, fmt.Errorf("preparing overlay tree: %w", err)
	}
	// The merged root takes its owner and mode from the upper's root, so
	// give it the lower's.
	if ov.UpperID, err = mkdirID(ov.Upper, lowerSt.Mode&0o7777); err != nil {
		return fail(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(ov.Upper, int(lowerSt.Uid), int(lowerSt.Gid)); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(ov.Upper, os.FileMode(lowerSt.Mode&0o777)|unixModeBits(lowerSt.Mode)); err != nil {
		return fail(err)
	}
	if ov.WorkID, err = mkdirID(ov.Work, 0o700); err != nil {
		return fail(err)
	}
	return Tree{Kind: KindOverlay, Dest: req.Dest, DestID: destID, Path: ov.Upper, Overlay: ov}, nil
}

// unixModeBits converts setuid/setgid/sticky bits to os.FileMode.
func unixModeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&unix.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// mkdirID creates dir exclusively and returns its identity.
func mkdirID(dir string, mode uint32) (FileID, error) {
	if err := ignoringEINTR(func() error { return unix.Mkdir(dir, mode&0o777) }); err != nil {
		if err == unix.EEXIST {
			return FileID{}, fmt.Errorf("%s: %w", dir, ErrExists)
		}
		return FileID{}, &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	id, _, err := statID(dir)
	return id, err
}

func (Overlay) check(t Tree) error {
	if err := checkTree(KindOverlay, t); err != nil {
		return err
	}
	ov := t.Overlay
	if ov == nil || ov.Lower == "" || ov.LowerID.Ino == 0 || ov.UpperID.Ino == 0 || ov.WorkID.Ino == 0 ||
		ov.Upper != filepath.Join(t.Dest, upperDirName) || ov.Work != filepath.Join(t.Dest, workDirName) {
		return fmt.Errorf("overlay tree record at %s is incomplete: %w", t.Dest, ErrInvalidRequest)
	}
	return nil
}

// Mounts returns the overlay mount of upper and work over the lower.
func (o Overlay) Mounts(t Tree) ([]Mount, error) {
	if err := o.check(t); err != nil {
		return nil, err
	}
	ov := t.Overlay
	return []Mount{{
		Type:   "overlay",
		Source: "overlay",
		Options: []string{
			"lowerdir=" + EscapeOverlayPath(ov.Lower),
			"upperdir=" + EscapeOverlayPath(ov.Upper),
			"workdir=" + EscapeOverlayPath(ov.Work),
		},
	}}, nil
}

// Verify checks the destination, upper, work and the borrowed lower.
func (o Overlay) Verify(ctx context.Context, t Tree) error {
	if err := o.check(t); err != nil {
		return err
	}
	ov := t.Overlay
	for _, c := range []struct {
		what, path string
		id         FileID
	}{
		{"destination", t.Dest, t.DestID},
		{"upper", ov.Upper, ov.UpperID},
		{"work", ov.Work, ov.WorkID},
		{"lower", ov.Lower, ov.LowerID},
	} {
		if err := checkID(c.what, c.path, c.id); err != nil {
			return err
		}
	}
	return nil
}

// Remove deletes upper, work and the destination. The lower is never
// deleted: Remove refuses a record whose owned parts are the lower.
func (o Overlay) Remove(ctx context.Context, t Tree) error {
	if err := o.check(t); err != nil {
		return err
	}
	ov := t.Overlay
	if ov.LowerID.Same(ov.UpperID) || ov.LowerID.Same(ov.WorkID) || ov.LowerID.Same(t.DestID) ||
		within(t.Dest, ov.Lower) {
		return fmt.Errorf("removing overlay tree %s: its record names the lower %s as owned: %w", t.Dest, ov.Lower, ErrIdentityMismatch)
	}
	if err := checkID("destination", t.Dest, t.DestID); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("removing overlay tree: %w", err)
	}
	if err := refuseMounts(t.Dest); err != nil {
		return fmt.Errorf("removing overlay tree: %w", err)
	}
	for _, c := range []struct {
		what, path string
		id         FileID
	}{
		{"work", ov.Work, ov.WorkID},
		{"upper", ov.Upper, ov.UpperID},
	} {
		if err := checkID(c.what, c.path, c.id); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("removing overlay tree: %w", err)
		}
		if err := removeAll(ctx, c.path); err != nil {
			return fmt.Errorf("removing overlay tree: %w", err)
		}
	}
	if err := removeDest(t); err != nil {
		return fmt.Errorf("removing overlay tree: %w", err)
	}
	return nil
}

// removeAll removes dir and everything below it, checking ctx first.
func removeAll(ctx context.Context, dir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
