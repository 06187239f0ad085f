package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// RemoveUnrecorded removes an allocation whose Prepare ran (or was cut
// short by a crash) but whose Tree record was never written. The caller
// must know that dest was created exclusively by this package for that
// allocation (the ledger's intent names it, and its path is unique); only
// then is deleting it safe without a recorded identity. So that a name
// someone else could have made is never taken for it, dest's parent must
// be a private allocation area (see PoolDir) reached without symbolic
// links, and dest a real directory owned by this user. A snapshot inside
// (dest/tree as a subvolume) is destroyed by id relative to dest's
// descriptor; everything else under dest is removed by descriptors
// (safefs.RemoveTree). Anything mounted below dest makes it refuse
// (ErrBusy).
//
// A worktree inside (dest/tree with its .git file, written by `git
// worktree add`) is settled through git too: once dest is gone the
// repository's record of it is pruned (`git worktree prune`), and branch,
// when given (the branch that allocation's Prepare made), is deleted if
// the worktree's own HEAD names it: no record was written, so no command
// ever ran in it and nothing was committed on it.
func RemoveUnrecorded(ctx context.Context, dest, branch string) error {
	if !filepath.IsAbs(dest) || filepath.Clean(dest) != dest || dest == "/" {
		return fmt.Errorf("removing %s: %w", dest, ErrInvalidRequest)
	}
	parent, err := safefs.OpenDir(filepath.Dir(dest))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	defer parent.Close()
	if err := parent.CheckPrivate(); err != nil {
		return fmt.Errorf("removing %s: an unrecorded allocation is only removed from a private allocation area: %w", dest, err)
	}
	d, err := parent.OpenDir(filepath.Base(dest))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("removing %s: it is owned by uid %d, so this package did not make it: %w", dest, st.Uid, ErrIdentityMismatch)
	}
	if err := refuseMounts(dest); err != nil {
		return err
	}
	if sv, err := inspectAt(d, treeDirName); err == nil {
		if err := destroySubvolume(d.Fd(), filepath.Join(dest, treeDirName), treeDirName, sv.ID); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	common, head := unrecordedWorktree(d)
	if err := removeDest(parent, Tree{Dest: dest, DestID: d.ID()}); err != nil {
		return fmt.Errorf("removing %s: %w", dest, err)
	}
	if common == "" {
		return nil
	}
	if _, err := git(ctx, "/", "--git-dir="+common, "worktree", "prune"); err != nil {
		return fmt.Errorf("removing %s: pruning its worktree from %s: %w", dest, common, err)
	}
	if branch != "" && head == "refs/heads/"+branch {
		if _, err := git(ctx, "/", "--git-dir="+common, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch); err == nil {
			if _, err := git(ctx, "/", "--git-dir="+common, "branch", "-D", "--end-of-options", branch); err != nil {
				return fmt.Errorf("removing %s: deleting its branch %s: %w", dest, branch, err)
			}
		}
	}
	return nil
}

// unrecordedWorktree reads, below the allocation d, the worktree that `git
// worktree add` made at d/tree: the repository's common git directory
// (its .git file's "gitdir: COMMON/worktrees/NAME") and the worktree's
// HEAD ("ref: refs/heads/BRANCH"), or "" when there is none. Files are
// opened by descriptors without following links; d is in a private
// allocation area, so only git (run by hostfork) wrote them.
func unrecordedWorktree(d *safefs.Dir) (common, head string) {
	read := func(dir *safefs.Dir, name string) string {
		f, err := dir.OpenFile(name, os.O_RDONLY, 0)
		if err != nil {
			return ""
		}
		defer f.Close()
		b := make([]byte, 4096)
		n, _ := f.Read(b)
		return strings.TrimSpace(string(b[:n]))
	}
	t, err := d.OpenDir(treeDirName)
	if err != nil {
		return "", ""
	}
	defer t.Close()
	meta, ok := strings.CutPrefix(read(t, ".git"), "gitdir: ")
	if !ok || !filepath.IsAbs(meta) || filepath.Base(filepath.Dir(meta)) != "worktrees" {
		return "", ""
	}
	if h, err := os.ReadFile(filepath.Join(meta, "HEAD")); err == nil {
		head = strings.TrimPrefix(strings.TrimSpace(string(h)), "ref: ")
	}
	return filepath.Dir(filepath.Dir(meta)), head
}
