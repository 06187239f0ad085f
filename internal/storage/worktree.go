package storage

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// KindWorktree is a `git worktree add` of a repository on a new branch.
const KindWorktree Kind = "worktree"

// ErrNotGitRepository reports a worktree source that is not a Git work
// tree.
var ErrNotGitRepository = errors.New("not a git repository")

// ErrDirty reports a worktree with uncommitted changes (or untracked
// files), which is removed only when forced.
var ErrDirty = errors.New("the worktree has uncommitted changes")

// WorktreeTree is the record of a Git worktree: the repository it belongs
// to, the branch it was made on and the commit it started from. The
// repository's .git is written only by git's own worktree and branch
// commands.
type WorktreeTree struct {
	Repo   string `json:"repo"`
	Ref    string `json:"ref"`
	Commit string `json:"commit"`
	Branch string `json:"branch"`
	Dir    string `json:"dir"`
	DirID  FileID `json:"dir_id"`
	// FilesCopy, for a fork's worktree, says how the parent's files
	// (its uncommitted changes included) were copied in; Ref is then the
	// parent's branch, and Commit the commit it was at.
	FilesCopy *CopyTree `json:"files_copy,omitempty"`
}

// Worktree is the worktree backend: Request.Source is the repository's
// work tree, Request.Ref the commit-ish (default HEAD) and Request.Branch
// the new branch (hostfork/ENV/TREE).
type Worktree struct{}

// Kind names the mechanism.
func (Worktree) Kind() Kind { return KindWorktree }

// git runs git in dir with no hooks, no fsmonitor program, no variable
// that redirects it (GIT_* removed) and no prompt; the error carries its
// stderr. git's own safe.directory check refuses a repository another
// user owns, so hostfork running as root never runs that user's
// configuration.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-C", dir}, args...)...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GIT_") })
	cmd.Env = append(cmd.Env, "GIT_TERMINAL_PROMPT=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), msg)
	}
	return strings.TrimSpace(out.String()), nil
}

// GitRepository checks that dir is the top of a Git work tree and
// resolves ref (default HEAD) to a commit; the error names the fix.
func GitRepository(ctx context.Context, dir, ref string) (commit string, err error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", fmt.Errorf("worktree trees need git, which is not on PATH (install git): %w", ErrUnsupportedKind)
	}
	top, err := git(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("%s is not a git repository (%v); give a repository's work tree (create one with 'git init' and a first commit), or choose kind overlay or copy: %w", dir, err, ErrNotGitRepository)
	}
	if r, err := filepath.EvalSymlinks(dir); err != nil || filepath.Clean(top) != r {
		return "", fmt.Errorf("%s is inside the git repository %s, not its top; give %s: %w", dir, top, top, ErrNotGitRepository)
	}
	ref = cmp.Or(ref, "HEAD")
	if strings.HasPrefix(ref, "-") {
		return "", fmt.Errorf("ref %q must not begin with '-': %w", ref, ErrInvalidRequest)
	}
	commit, err = git(ctx, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err != nil || commit == "" {
		return "", fmt.Errorf("%s has no commit %q (make a first commit, or give an existing branch, tag or commit after '@'): %w", dir, ref, ErrNotGitRepository)
	}
	return commit, nil
}

// Prepare makes Dest, then `git worktree add -b BRANCH Dest/tree COMMIT`.
// On failure it removes what it made (the worktree through git, then
// Dest), nothing else.
func (w Worktree) Prepare(ctx context.Context, req Request) (Tree, error) {
	return w.prepare(ctx, req, false)
}

// prepare is Prepare; with noCheckout the worktree is added with
// --no-checkout (only its .git file is there, and its index is empty), for
// a fork that fills it.
func (w Worktree) prepare(ctx context.Context, req Request, noCheckout bool) (Tree, error) {
	if err := checkRequest(KindWorktree, req); err != nil {
		return Tree{}, err
	}
	if err := ctx.Err(); err != nil {
		return Tree{}, fmt.Errorf("preparing worktree tree: %w", err)
	}
	if req.Branch == "" {
		req.Branch = "hostfork/" + filepath.Base(req.Dest)
	}
	if strings.HasPrefix(req.Branch, "-") {
		return Tree{}, fmt.Errorf("worktree tree: branch %q: %w", req.Branch, ErrInvalidRequest)
	}
	commit, err := GitRepository(ctx, req.Source, req.Ref)
	if err != nil {
		return Tree{}, err
	}
	if _, err := git(ctx, req.Source, "check-ref-format", "refs/heads/"+req.Branch); err != nil {
		return Tree{}, fmt.Errorf("worktree tree: branch %q is not a valid branch name: %w", req.Branch, ErrInvalidRequest)
	}
	if _, err := git(ctx, req.Source, "rev-parse", "--verify", "--quiet", "refs/heads/"+req.Branch); err == nil {
		return Tree{}, fmt.Errorf("worktree tree: branch %s already exists in %s; delete it ('git branch -D %s') or choose another environment: %w", req.Branch, req.Source, req.Branch, ErrExists)
	}
	src, err := openSource(KindWorktree, req)
	if err != nil {
		return Tree{}, err
	}
	defer src.Close()
	parent, dest, err := newDest(KindWorktree, req, src, nil)
	if err != nil {
		return Tree{}, err
	}
	defer parent.Close()
	t := Tree{Kind: KindWorktree, Dest: req.Dest, DestID: dest.ID(), Path: filepath.Join(req.Dest, treeDirName)}
	dest.Close()
	wt := &WorktreeTree{Repo: req.Source, Ref: req.Ref, Commit: commit, Branch: req.Branch, Dir: t.Path}
	t.Worktree = wt
	undo := func() {
		_, _ = git(context.WithoutCancel(ctx), req.Source, "worktree", "remove", "--force", t.Path)
		_, _ = git(context.WithoutCancel(ctx), req.Source, "worktree", "prune")
		_, _ = git(context.WithoutCancel(ctx), req.Source, "branch", "-D", "--end-of-options", req.Branch)
		_ = removeDest(parent, t)
	}
	add := []string{"worktree", "add", "--quiet"}
	if noCheckout {
		add = append(add, "--no-checkout")
	}
	if _, err := git(ctx, req.Source, append(add, "-b", req.Branch, "--end-of-options", t.Path, commit)...); err != nil {
		undo()
		return Tree{}, fmt.Errorf("preparing worktree tree: %w", err)
	}
	d, err := safefs.OpenDir(t.Path)
	if err != nil {
		undo()
		return Tree{}, fmt.Errorf("preparing worktree tree: %w", err)
	}
	wt.DirID = d.ID()
	d.Close()
	return t, nil
}

func (Worktree) check(t Tree) error {
	if err := checkTree(KindWorktree, t); err != nil {
		return err
	}
	w := t.Worktree
	if w == nil || w.DirID.Ino == 0 || w.Dir != filepath.Join(t.Dest, treeDirName) || t.Path != w.Dir || !filepath.IsAbs(w.Repo) || w.Branch == "" {
		return fmt.Errorf("worktree tree record at %s is incomplete: %w", t.Dest, ErrInvalidRequest)
	}
	return nil
}

// Mounts returns a bind mount of the worktree.
func (w Worktree) Mounts(t Tree) ([]Mount, error) {
	if err := w.check(t); err != nil {
		return nil, err
	}
	return []Mount{{Type: "bind", Source: t.Worktree.Dir, Options: []string{"bind"}}}, nil
}

// openDir opens the worktree's directory through the verified
// destination.
func (w Worktree) openDir(t Tree) (*safefs.Dir, error) {
	return inDest(t, w.check, func(dest *safefs.Dir) (*safefs.Dir, error) {
		return openPart(dest, treeDirName, "worktree", t.Worktree.DirID)
	})
}

// Verify checks the destination and the worktree's directory.
func (w Worktree) Verify(ctx context.Context, t Tree) error { return closed(w.Open(ctx, t)) }

// Open opens the worktree through the verified destination.
func (w Worktree) Open(ctx context.Context, t Tree) (*Opened, error) {
	return bindOpened(w.openDir(t))
}

// Dirty says what a worktree holds that its branch doesn't ("" nothing):
// the first lines of `git status --porcelain`.
func (w Worktree) Dirty(ctx context.Context, t Tree) (string, error) {
	if err := w.Verify(ctx, t); err != nil {
		return "", err
	}
	out, err := git(ctx, t.Worktree.Dir, "status", "--porcelain", "--untracked-files=normal")
	if err != nil || out == "" {
		return "", err
	}
	lines := strings.Split(out, "\n")
	if len(lines) > 3 {
		lines = append(lines[:3], fmt.Sprintf("… %d more", len(lines)-3))
	}
	return fmt.Sprintf("%d uncommitted change(s): %s", len(strings.Split(out, "\n")), strings.Join(lines, "; ")), nil
}

// Commit commits everything in the worktree on its branch with msg, as
// git's configured (or hostfork's) identity; "" when there was nothing to
// commit.
func (w Worktree) Commit(ctx context.Context, t Tree, msg string) (string, error) {
	if err := w.Verify(ctx, t); err != nil {
		return "", err
	}
	if strings.TrimSpace(msg) == "" {
		return "", fmt.Errorf("a commit message is needed: %w", ErrInvalidRequest)
	}
	dir := t.Worktree.Dir
	if _, err := git(ctx, dir, "add", "--all"); err != nil {
		return "", err
	}
	if _, err := git(ctx, dir, "diff", "--cached", "--quiet"); err == nil {
		return "", nil
	}
	args := []string{"commit", "--quiet", "--no-verify", "-m", msg}
	if _, err := git(ctx, dir, "config", "user.email"); err != nil {
		args = append([]string{"-c", "user.name=hostfork", "-c", "user.email=hostfork@localhost"}, args...)
	}
	if _, err := git(ctx, dir, args...); err != nil {
		return "", err
	}
	return git(ctx, dir, "rev-parse", "HEAD")
}

// Remove removes a clean worktree: `git worktree remove`, then `git
// worktree prune`, then the destination. The branch stays. A dirty
// worktree is refused with ErrDirty (RemoveWorktree forces it).
func (w Worktree) Remove(ctx context.Context, t Tree) error {
	return w.RemoveWorktree(ctx, t, false, false)
}

// RemoveWorktree is Remove, also of a dirty worktree when force, and
// deleting the branch too when deleteBranch.
func (w Worktree) RemoveWorktree(ctx context.Context, t Tree, force, deleteBranch bool) error {
	if err := w.check(t); err != nil {
		return err
	}
	parent, dest, err := openDest(t)
	if errors.Is(err, os.ErrNotExist) {
		return w.forget(ctx, t, deleteBranch)
	}
	if err != nil {
		return fmt.Errorf("removing worktree tree: %w", err)
	}
	defer parent.Close()
	d, err := openPart(dest, treeDirName, "worktree", t.Worktree.DirID)
	dest.Close()
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("removing worktree tree: %w", err)
	default:
		d.Close()
		if err := refuseMounts(t.Dest); err != nil {
			return fmt.Errorf("removing worktree tree: %w", err)
		}
		if !force {
			dirty, err := w.Dirty(ctx, t)
			if err != nil {
				return fmt.Errorf("removing worktree tree: %w", err)
			}
			if dirty != "" {
				return fmt.Errorf("worktree %s (branch %s): %s; commit them ('hostfork export ENV TREE --commit MSG') or discard them with gc --force: %w", t.Worktree.Dir, t.Worktree.Branch, dirty, ErrDirty)
			}
		}
		args := []string{"worktree", "remove"}
		if force {
			args = append(args, "--force", "--force")
		}
		if _, err := git(ctx, t.Worktree.Repo, append(args, "--end-of-options", t.Worktree.Dir)...); err != nil {
			return fmt.Errorf("removing worktree tree: %w", err)
		}
	}
	if err := w.forget(ctx, t, deleteBranch); err != nil {
		return err
	}
	if err := removeDest(parent, t); err != nil {
		return fmt.Errorf("removing worktree tree: %w", err)
	}
	return nil
}

// forget prunes the repository's record of a worktree that is gone and,
// when asked, deletes its branch.
func (Worktree) forget(ctx context.Context, t Tree, deleteBranch bool) error {
	if _, err := git(ctx, t.Worktree.Repo, "worktree", "prune"); err != nil {
		return fmt.Errorf("removing worktree tree: %w", err)
	}
	if deleteBranch {
		if _, err := git(ctx, t.Worktree.Repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+t.Worktree.Branch); err == nil {
			if _, err := git(ctx, t.Worktree.Repo, "branch", "-D", "--end-of-options", t.Worktree.Branch); err != nil {
				return fmt.Errorf("deleting branch %s: %w", t.Worktree.Branch, err)
			}
		}
	}
	return nil
}
