package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/storage/storagetest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

func prepareOverlay(t *testing.T, lower, dest string) storage.Tree {
	t.Helper()
	tree, err := storage.Overlay{}.Prepare(context.Background(), storage.Request{Dest: dest, Source: lower})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := (storage.Overlay{}).Remove(context.Background(), tree); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	return tree
}

// An overlay over a directory of the ext4 root filesystem: writes through
// the view land in the upper only, and the host never sees the mount
// (RunInView checks the host mount table while the view is up).
func TestOverlayWritesLandInUpperOnly(t *testing.T) {
	testutil.RequireRoot(t)
	dir := ext4Dir(t)
	lower := filepath.Join(dir, "lower")
	writeFiles(t, lower, map[string]string{"a.txt": "alpha\n", "dir/b.txt": "beta\n", "dir/sub/c.txt": "gamma\n"})
	if err := os.Chmod(lower, 0o751); err != nil {
		t.Fatal(err)
	}
	before := storagetest.Manifest(t, lower)
	tree := prepareOverlay(t, lower, filepath.Join(dir, "env"))
	if tree.Path != tree.Overlay.Upper {
		t.Errorf("Path %s, upper %s", tree.Path, tree.Overlay.Upper)
	}
	m, err := storage.Overlay{}.Mounts(tree)
	if err != nil {
		t.Fatal(err)
	}
	out := storagetest.RunInView(t, m, `stat -c %a .; echo changed > a.txt; echo new > new.txt; rm dir/b.txt; cat dir/sub/c.txt`)
	if out != "751\ngamma\n" {
		t.Errorf("view: %q (the merged root should keep the lower root's mode)", out)
	}
	storagetest.SameManifest(t, "lower", before, storagetest.Manifest(t, lower))

	up := tree.Overlay.Upper
	if got := readFile(t, filepath.Join(up, "a.txt")); got != "changed\n" {
		t.Errorf("upper a.txt: %q", got)
	}
	if got := readFile(t, filepath.Join(up, "new.txt")); got != "new\n" {
		t.Errorf("upper new.txt: %q", got)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(up, "dir/b.txt"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("upper dir/b.txt should be a whiteout (0:0 character device): mode %o rdev %d, %v", st.Mode, st.Rdev, err)
	}
	if _, err := os.Lstat(filepath.Join(up, "dir/sub/c.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unchanged file was copied up: %v", err)
	}
}

// After the keeper is gone the view is rebuilt from the recorded lower and
// upper; a lower replaced in the meantime is refused, and removal still
// deletes only what the overlay owns.
func TestOverlayReconstructChecksTheLower(t *testing.T) {
	testutil.RequireRoot(t)
	dir := ext4Dir(t)
	lower := filepath.Join(dir, "lower")
	writeFiles(t, lower, map[string]string{"a.txt": "alpha\n"})
	tree := prepareOverlay(t, lower, filepath.Join(dir, "env"))
	m, err := storage.Overlay{}.Mounts(tree)
	if err != nil {
		t.Fatal(err)
	}
	storagetest.RunInView(t, m, `echo mine > mine.txt`)

	// The first view's namespace is gone; rebuild it from the record.
	m, err = storage.Reopen(context.Background(), tree)
	if err != nil {
		t.Fatal(err)
	}
	if out := storagetest.RunInView(t, m, `cat a.txt mine.txt`); out != "alpha\nmine\n" {
		t.Errorf("reconstructed view: %q", out)
	}

	// Replace the lower by another directory at the same path.
	old := filepath.Join(dir, "lower.old")
	if err := os.Rename(lower, old); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, lower, map[string]string{"a.txt": "impostor\n"})
	if _, err := storage.Reopen(context.Background(), tree); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Reopen over a replaced lower: %v, want ErrIdentityMismatch", err)
	}
	if err := (storage.Overlay{}).Remove(context.Background(), tree); err != nil {
		t.Fatalf("Remove with a replaced lower: %v", err)
	}
	for _, p := range []string{filepath.Join(old, "a.txt"), filepath.Join(lower, "a.txt")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("Remove touched a lower: %v", err)
		}
	}
}

// A record that names the lower as one of the overlay's owned parts is
// refused, so a corrupted record can't delete a borrowed lower.
func TestOverlayRemoveNeverDeletesTheLower(t *testing.T) {
	dir := t.TempDir()
	lower := filepath.Join(dir, "upper") // placed where an owned upper would be
	writeFiles(t, lower, map[string]string{"keep": "me"})
	tree, err := storage.Overlay{}.Prepare(context.Background(), storage.Request{Dest: filepath.Join(dir, "env"), Source: lower})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = (storage.Overlay{}).Remove(context.Background(), tree) }()

	forged := tree
	ov := *tree.Overlay
	forged.Overlay = &ov
	forged.Dest, forged.DestID = dir, mustID(t, dir)
	ov.Upper, ov.UpperID = lower, ov.LowerID
	ov.Work = filepath.Join(dir, "work")
	if err := (storage.Overlay{}).Remove(context.Background(), forged); !errors.Is(err, storage.ErrIdentityMismatch) {
		t.Errorf("Remove of a record naming the lower as upper: %v, want ErrIdentityMismatch", err)
	}
	if got := readFile(t, filepath.Join(lower, "keep")); got != "me" {
		t.Errorf("lower content: %q", got)
	}
}

// mustID builds the FileID a record would hold for p.
func mustID(t testing.TB, p string) storage.FileID {
	t.Helper()
	var st unix.Stat_t
	var sf unix.Statfs_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(p, &sf); err != nil {
		t.Fatal(err)
	}
	return storage.FileID{Dev: st.Dev, Ino: st.Ino, FSID: uint64(uint32(sf.Fsid.Val[0]))<<32 | uint64(uint32(sf.Fsid.Val[1]))}
}

// Paths with the characters overlayfs treats specially still mount.
func TestOverlayEscapesPaths(t *testing.T) {
	testutil.RequireRoot(t)
	dir := filepath.Join(tmpfsDir(t), `odd, name:here\x`)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lower := filepath.Join(dir, "low,er")
	writeFiles(t, lower, map[string]string{"f": "ok\n"})
	tree := prepareOverlay(t, lower, filepath.Join(dir, "env:1"))
	m, err := storage.Overlay{}.Mounts(tree)
	if err != nil {
		t.Fatal(err)
	}
	if out := storagetest.RunInView(t, m, `cat f; echo w > g`); out != "ok\n" {
		t.Errorf("view: %q", out)
	}
	if got := readFile(t, filepath.Join(tree.Overlay.Upper, "g")); got != "w\n" {
		t.Errorf("upper g: %q", got)
	}
}
