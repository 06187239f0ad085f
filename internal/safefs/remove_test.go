package safefs_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/safefs/safefstest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

// makeTree writes a small tree at dir: files, nested directories, a fifo
// and, as root (whom permissions don't stop), a directory without
// permissions.
func makeTree(t testing.TB, dir string) {
	t.Helper()
	for _, d := range []string{"a/b/c", "d", "locked/inner"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	for _, f := range []string{"f", "a/g", "a/b/c/h", "locked/inner/i"} {
		must(t, os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644))
	}
	must(t, unix.Mkfifo(filepath.Join(dir, "d/fifo"), 0o600))
	if os.Geteuid() == 0 {
		must(t, os.Chmod(filepath.Join(dir, "locked"), 0))
	}
}

func idOf(t testing.TB, p string) safefs.FileID {
	t.Helper()
	d, err := safefs.OpenDir(p)
	must(t, err)
	defer d.Close()
	return d.ID()
}

func TestRemoveTreeRefusesAnotherObject(t *testing.T) {
	dir := tempDir(t)
	parent := open(t, dir)
	tree := filepath.Join(dir, "tree")
	makeTree(t, tree)
	want := idOf(t, tree)

	// The name swapped for another directory.
	must(t, os.Rename(tree, tree+".aside"))
	makeTree(t, tree)
	if err := parent.RemoveTree("tree", want); !errors.Is(err, safefs.ErrIdentityMismatch) {
		t.Errorf("RemoveTree of a swapped directory: %v, want ErrIdentityMismatch", err)
	}
	for _, p := range []string{tree + "/a/b/c/h", tree + ".aside/a/b/c/h"} {
		if !exists(p) {
			t.Errorf("a refused RemoveTree deleted %s", p)
		}
	}
	// The name swapped for a symbolic link to the recorded tree itself.
	must(t, os.RemoveAll(tree))
	must(t, os.Symlink("tree.aside", tree))
	if err := parent.RemoveTree("tree", want); !errors.Is(err, safefs.ErrIdentityMismatch) {
		t.Errorf("RemoveTree of a symbolic link: %v, want ErrIdentityMismatch", err)
	}
	if !exists(tree+".aside/a/b/c/h") || !exists(tree) {
		t.Errorf("a refused RemoveTree deleted through or at the link")
	}
	// A regular file.
	must(t, os.Remove(tree))
	must(t, os.WriteFile(tree, nil, 0o600))
	if err := parent.RemoveTree("tree", want); !errors.Is(err, safefs.ErrIdentityMismatch) {
		t.Errorf("RemoveTree of a file: %v, want ErrIdentityMismatch", err)
	}
	must(t, os.Remove(tree))
	if err := parent.RemoveTree("tree", want); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("RemoveTree of a missing name: %v, want not-exist", err)
	}
	// The real one goes, all of it.
	must(t, os.Rename(tree+".aside", tree))
	if err := parent.RemoveTree("tree", want); err != nil {
		t.Fatalf("RemoveTree: %v", err)
	}
	if exists(tree) {
		t.Errorf("tree still there")
	}
}

// Symbolic links inside the tree, absolute and relative, to a directory
// and to a file only root can reach, and a hard link to that file: the
// links go, what they point at stays.
func TestRemoveTreeNeverFollowsLinksInside(t *testing.T) {
	testutil.RequireRoot(t)
	protected := safefstest.Protected(t)
	dir := tempDir(t)
	tree := filepath.Join(dir, "tree")
	makeTree(t, tree)
	rel, err := filepath.Rel(filepath.Join(tree, "a/b"), protected)
	must(t, err)
	must(t, os.Symlink(protected, filepath.Join(tree, "abs")))
	must(t, os.Symlink(rel, filepath.Join(tree, "a/b/rel")))
	must(t, os.Symlink(filepath.Join(protected, "keep"), filepath.Join(tree, "a/file-link")))
	must(t, os.Symlink(protected, filepath.Join(tree, "a/b/c/deep")))
	if err := os.Link(filepath.Join(protected, "keep"), filepath.Join(tree, "hard")); err != nil {
		t.Logf("no hard link into %s (%v): protected is on another filesystem", protected, err)
	}
	before := safefstest.Snapshot(t, protected)
	parent := open(t, dir)
	if err := parent.RemoveTree("tree", idOf(t, tree)); err != nil {
		t.Fatalf("RemoveTree: %v", err)
	}
	if exists(tree) {
		t.Errorf("tree still there")
	}
	if after := safefstest.Snapshot(t, protected); after != before {
		t.Errorf("the protected directory changed:\n%s\nnow\n%s", before, after)
	}
}

// A mount inside the tree, of another filesystem or a bind of the same
// one, is refused and nothing below it is touched.
func TestRemoveTreeStopsAtMounts(t *testing.T) {
	testutil.RequireRoot(t)
	dir := tempDir(t)
	tree := filepath.Join(dir, "tree")
	makeTree(t, tree)
	other := filepath.Join(dir, "other")
	must(t, os.Mkdir(other, 0o755))
	must(t, os.WriteFile(filepath.Join(other, "precious"), []byte("x"), 0o644))
	for _, c := range []struct {
		name  string
		mount func(target string) error
	}{
		{"tmpfs", func(target string) error { return unix.Mount("tmpfs", target, "tmpfs", 0, "size=1m") }},
		{"bind of the same filesystem", func(target string) error { return unix.Mount(other, target, "", unix.MS_BIND, "") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(tree, "a/b/mnt")
			must(t, os.MkdirAll(target, 0o755))
			if err := c.mount(target); err != nil {
				testutil.Skip(t, "mount: "+err.Error())
			}
			t.Cleanup(func() {
				if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
					t.Errorf("cleanup: unmounting %s: %v", target, err)
				}
			})
			must(t, os.WriteFile(filepath.Join(target, "inside"), []byte("y"), 0o644))
			parent := open(t, dir)
			err := parent.RemoveTree("tree", idOf(t, tree))
			if !errors.Is(err, safefs.ErrCrossesMount) {
				t.Fatalf("RemoveTree over a mount: %v, want ErrCrossesMount", err)
			}
			if !exists(filepath.Join(target, "inside")) || !exists(filepath.Join(other, "precious")) {
				t.Errorf("RemoveTree went below the mount point")
			}
			must(t, unix.Unmount(target, 0))
		})
	}
	parent := open(t, dir)
	if err := parent.RemoveTree("tree", idOf(t, tree)); err != nil {
		t.Fatalf("RemoveTree once unmounted: %v", err)
	}
}

// A Btrfs subvolume inside the tree is the same filesystem on the same
// mount: it is removed with the rest.
func TestRemoveTreeTakesNestedSubvolumes(t *testing.T) {
	if _, err := exec.LookPath("btrfs"); err != nil {
		testutil.Skip(t, "btrfs not found (install btrfs-progs)")
	}
	mnt := testutil.LoopBtrfs(t, "")
	tree := filepath.Join(mnt, "tree")
	makeTree(t, tree)
	sub := filepath.Join(tree, "a/subvol")
	if out, err := exec.Command("btrfs", "subvolume", "create", sub).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	makeTree(t, sub)
	parent := open(t, mnt)
	if err := parent.RemoveTree("tree", idOf(t, tree)); err != nil {
		t.Fatalf("RemoveTree with a nested subvolume: %v", err)
	}
	if exists(tree) {
		t.Errorf("tree still there")
	}
}

// The adversary owns directories inside the tree being removed (as a
// workload's user would) and, while RemoveTree runs, keeps renaming them
// aside and putting symbolic links to a root-only directory in their
// place. Nothing in that directory may go, whatever RemoveTree returns.
func TestRemoveTreeRaceWithSymlinkSwaps(t *testing.T) {
	testutil.RequireRoot(t)
	u := safefstest.NewUser(t)
	protected := safefstest.Protected(t)
	for i := 0; i < 20; i++ {
		must(t, os.WriteFile(filepath.Join(protected, fmt.Sprintf("f%d", i)), []byte("x"), 0o600))
	}
	must(t, os.Mkdir(filepath.Join(protected, "sub"), 0o700))
	must(t, os.WriteFile(filepath.Join(protected, "sub/g"), []byte("x"), 0o600))
	before := safefstest.Snapshot(t, protected)
	base := safefstest.SharedDir(t, "/dev/shm")
	parent := open(t, base)
	var results []string
	for round := 0; round < 4; round++ {
		tree := filepath.Join(base, fmt.Sprintf("tree%d", round))
		must(t, os.Mkdir(tree, 0o755))
		for i := 0; i < 10; i++ {
			theirs := filepath.Join(tree, fmt.Sprintf("u%d", i))
			for j := 0; j < 10; j++ {
				d := filepath.Join(theirs, fmt.Sprintf("d%d/e", j))
				must(t, os.MkdirAll(d, 0o755))
				for k := 0; k < 20; k++ {
					must(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", k)), []byte("data"), 0o644))
				}
			}
			must(t, filepath.WalkDir(theirs, func(p string, _ fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				return os.Lchown(p, u.UID, u.GID)
			}))
		}
		want := idOf(t, tree)
		attack := u.Start(t, "swap-inside", tree, protected)
		err := parent.RemoveTree(filepath.Base(tree), want)
		summary := attack.Stop(t)
		results = append(results, fmt.Sprintf("round %d: RemoveTree: %v; attacker %s", round, err, summary))
		if err != nil && exists(tree) {
			// Whatever is left is the tree's; clean it the same way.
			if err := parent.RemoveTree(filepath.Base(tree), want); err != nil {
				t.Errorf("second RemoveTree after the attack: %v", err)
			}
		}
		if exists(tree) {
			t.Errorf("round %d: %s is still there", round, tree)
		}
	}
	for _, r := range results {
		t.Log(r)
	}
	if after := safefstest.Snapshot(t, protected); after != before {
		t.Fatalf("the protected directory changed:\n%s\nnow\n%s", before, after)
	}
}

func TestRemoveChecksIdentity(t *testing.T) {
	dir := tempDir(t)
	d := open(t, dir)
	f := filepath.Join(dir, "f")
	must(t, os.WriteFile(f, []byte("x"), 0o600))
	st := lstat(t, f)
	want := safefs.FileID{Dev: st.Dev, Ino: st.Ino}
	must(t, os.Rename(f, f+".aside"))
	must(t, os.Symlink(f+".aside", f))
	if err := d.Remove("f", want); !errors.Is(err, safefs.ErrIdentityMismatch) {
		t.Errorf("Remove of a swapped name: %v, want ErrIdentityMismatch", err)
	}
	if !exists(f) || !exists(f+".aside") {
		t.Errorf("a refused Remove removed something")
	}
	must(t, os.Remove(f))
	must(t, os.Rename(f+".aside", f))
	if err := d.Remove("f", want); err != nil || exists(f) {
		t.Errorf("Remove: %v", err)
	}
	must(t, os.Mkdir(f, 0o700))
	st = lstat(t, f)
	if err := d.Remove("f", safefs.FileID{Dev: st.Dev, Ino: st.Ino}); err != nil || exists(f) {
		t.Errorf("Remove of an empty directory: %v", err)
	}
}
