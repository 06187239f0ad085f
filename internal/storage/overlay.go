package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
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
	// Record the lower by its resolved, link-free path, opened later
	// without following links; the identity check catches a replaced
	// directory.
	lower, err := openSource(KindOverlay, req)
	if err != nil {
		return Tree{}, err
	}
	defer lower.Close()
	lowerPath := lower.Path()
	lowerSt, err := lower.Stat()
	if err != nil {
		return Tree{}, fmt.Errorf("preparing overlay tree: %w", err)
	}
	parent, dest, err := newDest(KindOverlay, req, lower, nil)
	if err != nil {
		return Tree{}, err
	}
	defer parent.Close()
	defer dest.Close()
	t := Tree{Kind: KindOverlay, Dest: req.Dest, DestID: dest.ID()}
	ov := &OverlayTree{
		Lower:   lowerPath,
		LowerID: lower.ID(),
		Upper:   filepath.Join(req.Dest, upperDirName),
		Work:    filepath.Join(req.Dest, workDirName),
	}
	fail := func(err error) (Tree, error) {
		if rerr := removeDest(parent, t); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing what was made: %w", rerr))
		}
		return Tree{}, fmt.Errorf("preparing overlay tree: %w", err)
	}
	// The merged root takes its owner and mode from the upper's root, so
	// give it the lower's, on its descriptor.
	upper, err := dest.MkdirExclusive(upperDirName, 0o700)
	if err != nil {
		return fail(err)
	}
	defer upper.Close()
	if os.Geteuid() == 0 {
		if err := linux.IgnoringEINTR(func() error { return unix.Fchown(upper.Fd(), int(lowerSt.Uid), int(lowerSt.Gid)) }); err != nil {
			return fail(&os.PathError{Op: "fchown", Path: ov.Upper, Err: err})
		}
	}
	if err := linux.IgnoringEINTR(func() error { return unix.Fchmod(upper.Fd(), lowerSt.Mode&0o7777) }); err != nil {
		return fail(&os.PathError{Op: "fchmod", Path: ov.Upper, Err: err})
	}
	work, err := dest.MkdirExclusive(workDirName, 0o700)
	if err != nil {
		return fail(err)
	}
	defer work.Close()
	ov.UpperID, ov.WorkID = upper.ID(), work.ID()
	t.Path, t.Overlay = ov.Upper, ov
	return t, nil
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

// openLower opens the borrowed lower and checks it is the recorded
// directory.
func openLower(ov *OverlayTree) (*safefs.Dir, error) {
	d, err := safefs.OpenDir(ov.Lower)
	if err != nil {
		if errors.Is(err, safefs.ErrSymlink) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("lower %s: %w: %w", ov.Lower, err, ErrIdentityMismatch)
		}
		return nil, err
	}
	if got := d.ID(); !got.Same(ov.LowerID) {
		d.Close()
		return nil, fmt.Errorf("lower %s is now %v, recorded %v: %w", ov.Lower, got, ov.LowerID, ErrIdentityMismatch)
	}
	return d, nil
}

// Verify checks the destination, upper, work and the borrowed lower.
func (o Overlay) Verify(ctx context.Context, t Tree) error { return closed(o.Open(ctx, t)) }

// Remove deletes upper, work and the destination. The lower is never
// deleted: Remove refuses a record whose owned parts are the lower.
func (o Overlay) Remove(ctx context.Context, t Tree) error {
	check := func(t Tree) error {
		if err := o.check(t); err != nil {
			return err
		}
		ov := t.Overlay
		if ov.LowerID.Same(ov.UpperID) || ov.LowerID.Same(ov.WorkID) || ov.LowerID.Same(t.DestID) ||
			safefs.Within(t.Dest, filepath.Clean(ov.Lower)) {
			return fmt.Errorf("removing overlay tree %s: its record names the lower %s as owned: %w", t.Dest, ov.Lower, ErrIdentityMismatch)
		}
		return nil
	}
	return removeTree(ctx, t, check, func(dest *safefs.Dir) error {
		return partsThere(dest, part{"work", workDirName, t.Overlay.WorkID}, part{"upper", upperDirName, t.Overlay.UpperID})
	}, nil)
}
