package storage_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// gitRepo makes a real repository with one commit.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testutil.Skip(t, "needs git (apt-get install git)")
	}
	repo := filepath.Join(t.TempDir(), "repo")
	writeFiles(t, repo, map[string]string{"f.txt": "base\n"})
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first"}} {
		runGit(t, repo, args...)
	}
	return repo
}

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestWorktree: a worktree on its own branch; a dirty one is refused by
// Remove and taken by a forced removal; the branch and its commits stay
// unless deleting them is asked for; a source that isn't a repository is
// a clear error with nothing made.
func TestWorktree(t *testing.T) {
	ctx := context.Background()
	repo := gitRepo(t)
	pool := t.TempDir()
	w := storage.Worktree{}
	tree, err := w.Prepare(ctx, storage.Request{Dest: filepath.Join(pool, "e1-proj"), Source: repo, Branch: "hostfork/e1/proj"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.RemoveWorktree(context.Background(), tree, true, true) })
	if got := runGit(t, repo, "rev-parse", "hostfork/e1/proj"); got != tree.Worktree.Commit || got != runGit(t, repo, "rev-parse", "main") {
		t.Fatalf("branch at %s, record %s", got, tree.Worktree.Commit)
	}
	if readFile(t, filepath.Join(tree.Path, "f.txt")) != "base\n" {
		t.Fatal("the worktree lacks the commit's file")
	}
	if err := w.Verify(ctx, tree); err != nil {
		t.Fatal(err)
	}
	// A second environment can't take the same branch; nothing is made.
	if _, err := w.Prepare(ctx, storage.Request{Dest: filepath.Join(pool, "e1-again"), Source: repo, Branch: "hostfork/e1/proj"}); !errors.Is(err, storage.ErrExists) {
		t.Fatalf("second worktree on the branch: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(pool, "e1-again")); !os.IsNotExist(err) {
		t.Fatalf("a refused worktree left its destination: %v", err)
	}

	writeFiles(t, tree.Path, map[string]string{"f.txt": "changed\n", "new.txt": "new\n"})
	if err := w.Remove(ctx, tree); !errors.Is(err, storage.ErrDirty) || !strings.Contains(err.Error(), "uncommitted") {
		t.Fatalf("Remove of a dirty worktree: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tree.Path, "new.txt")); err != nil {
		t.Fatalf("the refused removal lost a file: %v", err)
	}
	c, err := w.Commit(ctx, tree, "agent work")
	if err != nil || c == "" {
		t.Fatalf("Commit: %q %v", c, err)
	}
	if d, err := w.Dirty(ctx, tree); d != "" || err != nil {
		t.Fatalf("after the commit: %q %v", d, err)
	}
	if err := w.Remove(ctx, tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tree.Dest); !os.IsNotExist(err) {
		t.Fatalf("the destination is still there: %v", err)
	}
	if got := runGit(t, repo, "rev-parse", "hostfork/e1/proj"); got != c {
		t.Fatalf("the branch is at %s, not the commit %s", got, c)
	}
	if got := runGit(t, repo, "show", "hostfork/e1/proj:new.txt"); got != "new" {
		t.Fatalf("the commit lacks the file: %q", got)
	}
	if l := runGit(t, repo, "worktree", "list"); strings.Contains(l, tree.Path) {
		t.Fatalf("the repository still lists the worktree: %s", l)
	}
	// Removing again is success; deleting the branch too.
	if err := w.RemoveWorktree(ctx, tree, false, true); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", repo, "rev-parse", "--verify", "--quiet", "refs/heads/hostfork/e1/proj").CombinedOutput(); err == nil {
		t.Fatalf("the branch survived: %s", out)
	}

	// A forced removal takes a dirty worktree.
	t2, err := w.Prepare(ctx, storage.Request{Dest: filepath.Join(pool, "e2-proj"), Source: repo, Ref: "main", Branch: "hostfork/e2/proj"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, t2.Path, map[string]string{"scratch.txt": "x\n"})
	if err := w.RemoveWorktree(ctx, t2, true, false); err != nil {
		t.Fatal(err)
	}
	runGit(t, repo, "rev-parse", "--verify", "refs/heads/hostfork/e2/proj")

	// Bad sources and refs: clear errors, nothing made.
	plain := t.TempDir()
	for name, req := range map[string]storage.Request{
		"not a repository": {Dest: filepath.Join(pool, "bad1"), Source: plain, Branch: "hostfork/b/x"},
		"subdirectory":     {Dest: filepath.Join(pool, "bad2"), Source: filepath.Join(repo, ".git"), Branch: "hostfork/b/y"},
		"unknown ref":      {Dest: filepath.Join(pool, "bad3"), Source: repo, Ref: "nosuch", Branch: "hostfork/b/z"},
	} {
		_, err := w.Prepare(ctx, req)
		if !errors.Is(err, storage.ErrNotGitRepository) {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := os.Lstat(req.Dest); !os.IsNotExist(err) {
			t.Errorf("%s left %s", name, req.Dest)
		}
	}
	if _, err := w.Prepare(ctx, storage.Request{Dest: filepath.Join(pool, "bad4"), Source: plain, Branch: "hostfork/b/x"}); err == nil || !strings.Contains(err.Error(), "git init") {
		t.Errorf("the error doesn't name the fix: %v", err)
	}
}
