package storage

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// Fork makes a new tree at req.Dest (req.Source is ignored) whose data
// starts as the recorded tree t's data now: the caller makes "now" one
// instant by freezing every writer of t first (decision 112).
//
//   - btrfs: a writable snapshot of t's snapshot (BTRFS_IOC_SNAP_CREATE_V2),
//     so req.Dest must be on t's filesystem;
//   - copy: a copy of t's directory, cloned with FICLONE where the
//     filesystem can and copied otherwise (Copy.Reflink says which);
//   - overlay: a new upper and work over t's lower (checked by identity),
//     with t's upper cloned or copied into the new upper, its
//     trusted.overlay.* marks included (OverlayTree.UpperCopy says how);
//   - worktree: a `git worktree add` of req.Branch at the commit t's
//     branch is at, its files then replaced by t's, uncommitted changes
//     included (WorktreeTree.FilesCopy says how; forkWorktree).
//
// t is verified first; nothing of t is written. On failure Fork removes
// what it made and nothing else.
func Fork(ctx context.Context, t Tree, req Request) (Tree, error) {
	b, err := ForKind(t.Kind)
	if err != nil {
		return Tree{}, err
	}
	if err := b.Verify(ctx, t); err != nil {
		return Tree{}, fmt.Errorf("forking %s tree %s: %w", t.Kind, t.Dest, err)
	}
	switch t.Kind {
	case KindBtrfs:
		// The snapshot is the source, opened as the recorded subvolume.
		id := t.Btrfs.Root
		req.Source, req.SourceID = t.Path, &id
		return b.Prepare(ctx, req)
	case KindCopy:
		id := t.Copy.DirID
		req.Source, req.SourceID = t.Path, &id
		return b.Prepare(ctx, req)
	case KindOverlay:
		ov := t.Overlay
		req.Source, req.SourceID = ov.Lower, &ov.LowerID
		nt, err := b.Prepare(ctx, req)
		if err != nil {
			return Tree{}, err
		}
		ct, err := copyUpper(ctx, ov, nt.Overlay, req.Reflink)
		if err != nil {
			if rerr := b.Remove(context.Background(), nt); rerr != nil {
				err = fmt.Errorf("%w (and removing the new tree: %v)", err, rerr)
			}
			return Tree{}, fmt.Errorf("forking overlay tree %s: %w", t.Dest, err)
		}
		nt.Overlay.UpperCopy = ct
		return nt, nil
	case KindWorktree:
		return forkWorktree(ctx, t, req)
	}
	return Tree{}, fmt.Errorf("tree kind %q: %w", t.Kind, ErrUnsupportedKind)
}

// forkWorktree makes a worktree on a new branch (req.Branch) of t's
// repository at the commit t's branch is at now, added without a checkout,
// fills it with t's files (reflinked where the filesystem can), then lets
// git set its index to that commit (`git reset`, which touches no file):
// the parent's uncommitted changes, untracked and ignored files and
// deletions included, are the child's uncommitted changes. Only the
// worktree's own .git (a file naming its metadata in the repository) is
// git's; the repository's .git is written by git's commands alone. What
// the parent had staged is unstaged in the child.
func forkWorktree(ctx context.Context, t Tree, req Request) (Tree, error) {
	w := Worktree{}
	head, err := git(ctx, t.Worktree.Dir, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return Tree{}, fmt.Errorf("forking worktree tree %s: %w", t.Dest, err)
	}
	req.Source, req.SourceID, req.Ref = t.Worktree.Repo, nil, head
	nt, err := w.prepare(ctx, req, true)
	if err != nil {
		return Tree{}, err
	}
	nt.Worktree.Ref = t.Worktree.Branch
	ct, err := copyWorktreeFiles(ctx, w, t, nt, req.Reflink)
	if err == nil {
		_, err = git(ctx, nt.Worktree.Dir, "reset", "--quiet")
	}
	if err != nil {
		if rerr := w.RemoveWorktree(context.WithoutCancel(ctx), nt, true, true); rerr != nil {
			err = fmt.Errorf("%w (and removing the new worktree: %v)", err, rerr)
		}
		return Tree{}, fmt.Errorf("forking worktree tree %s: %w", t.Dest, err)
	}
	nt.Worktree.FilesCopy = ct
	return nt, nil
}

// copyWorktreeFiles copies from's files but its .git into the new,
// not checked out worktree to, by descriptors, each directory checked
// against its record.
func copyWorktreeFiles(ctx context.Context, w Worktree, from, to Tree, mode ReflinkMode) (*CopyTree, error) {
	src, err := w.openDir(from)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := w.openDir(to)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	c := newCopier(ctx, mode, dst)
	c.skipTop = ".git"
	if err := c.copyInto(src, dst); err != nil {
		return nil, err
	}
	return c.result(from.Worktree.Dir, to.Worktree.Dir, dst.ID()), nil
}

// copyUpper copies the contents of the upper from into the (empty, new)
// upper to, by descriptors, each checked against its record.
func copyUpper(ctx context.Context, from, to *OverlayTree, mode ReflinkMode) (*CopyTree, error) {
	src, err := safefs.OpenDir(from.Upper)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if !src.ID().Same(from.UpperID) {
		return nil, fmt.Errorf("upper %s is no longer the recorded directory: %w", from.Upper, ErrIdentityMismatch)
	}
	dst, err := safefs.OpenDir(to.Upper)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	if !dst.ID().Same(to.UpperID) {
		return nil, fmt.Errorf("upper %s is no longer the recorded directory: %w", to.Upper, ErrIdentityMismatch)
	}
	c := newCopier(ctx, mode, dst)
	c.overlayXattrs = true
	if err := c.copyInto(src, dst); err != nil {
		return nil, err
	}
	return c.result(from.Upper, filepath.Clean(to.Upper), dst.ID()), nil
}

// result is what a finished copy reports.
func (c *copier) result(source, dir string, id FileID) *CopyTree {
	ct := &CopyTree{Source: source, Dir: dir, DirID: id, Files: c.files, Cloned: c.cloned, Bytes: c.bytes}
	switch {
	case c.cloned == 0:
		ct.Reflink = ReflinkNone
	case c.cloned == c.files:
		ct.Reflink = ReflinkAll
	default:
		ct.Reflink = ReflinkPartial
	}
	return ct
}
