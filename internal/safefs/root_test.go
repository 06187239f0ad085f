package safefs_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/safefs"
)

// A Root bounds every name: ".." chains, absolute links and magic links
// made inside it never reach a file outside it, and a write at a link
// replaces the link.
func TestRootBoundsNames(t *testing.T) {
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("outside\n"), 0o600))
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("in\n"), 0o644))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs")))
	must(t, os.Symlink(strings.Repeat("../", 30)+strings.TrimPrefix(outside, "/")+"/secret", filepath.Join(dir, "dots")))
	must(t, os.Symlink("/proc/self/root"+outside+"/secret", filepath.Join(dir, "magic")))
	must(t, os.Symlink("/f", filepath.Join(dir, "rootlink")))
	r, err := safefs.OpenRoot(dir)
	must(t, err)
	defer r.Close()

	for _, name := range []string{"abs", "dots", "magic", "../../" + outside + "/secret", outside + "/secret"} {
		f, err := r.Open(name)
		if err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("%s read %q outside the root", name, b)
		}
	}
	// An absolute link means the root's own name.
	f, err := r.Open("rootlink")
	must(t, err)
	if b, _ := io.ReadAll(f); string(b) != "in\n" {
		t.Errorf("rootlink read %q", b)
	}
	f.Close()

	for _, name := range []string{"abs", "dots", "/../../abs"} {
		if _, err := r.WriteFile(name, strings.NewReader("w\n"), 0o600); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "outside\n" {
		t.Fatalf("the file outside changed: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "abs")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("abs after the write: %v %v", fi, err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 5 {
		t.Errorf("temporary files left: %v", es)
	}
}

// WriteFile's directory must exist: the error names it and the fix, and
// matches fs.ErrNotExist; nothing is made.
func TestRootWriteNeedsDirectory(t *testing.T) {
	dir := t.TempDir()
	r, err := safefs.OpenRoot(dir)
	must(t, err)
	defer r.Close()
	_, err = r.WriteFile("/a/b/c", strings.NewReader("x"), 0)
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, safefs.ErrNoParent) || !strings.Contains(err.Error(), "mkdir -p /a/b") {
		t.Errorf("write below a missing directory: %v", err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("made %v", es)
	}
	must(t, r.Mkdir("/a", 0o750))
	if err := r.Mkdir("/a", 0o750); !errors.Is(err, safefs.ErrExists) {
		t.Errorf("mkdir of an existing directory: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("made %v %v", fi, err)
	}
	// An existing file keeps its permissions when none are given.
	must(t, os.WriteFile(filepath.Join(dir, "a", "x"), []byte("old"), 0o640))
	if e, err := r.WriteFile("/a/x", strings.NewReader("new"), 0); err != nil || e.Mode.Perm() != 0o640 || e.Size != 3 {
		t.Errorf("rewrite: %+v %v", e, err)
	}
}

// ReadDir lists to a depth, parents first, links not followed, and stops
// at its bound.
func TestRootReadDir(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "d/e"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "d/e/f"), nil, 0o644))
	must(t, os.Symlink("/", filepath.Join(dir, "d/up")))
	r, err := safefs.OpenRoot(dir)
	must(t, err)
	defer r.Close()
	es, err := r.ReadDir("/", 0, 100)
	must(t, err)
	var got []string
	for _, e := range es {
		got = append(got, e.Path+":"+e.Type)
	}
	if strings.Join(got, " ") != "d:dir d/e:dir d/e/f:file d/up:symlink" {
		t.Errorf("listing %v", got)
	}
	if es, err := r.ReadDir("/", 1, 100); err != nil || len(es) != 1 {
		t.Errorf("depth 1: %v %v", es, err)
	}
	if _, err := r.ReadDir("/", 0, 2); !errors.Is(err, safefs.ErrTooMany) {
		t.Errorf("over the bound: %v", err)
	}
}

// Rename and Remove stay inside the root: a link to a directory outside is
// removed or moved as a link (its target untouched), a removal walks a
// directory without following the links in it, and names with ".." or
// links on the way resolve inside the root.
func TestRootRenameRemoveHostileLinks(t *testing.T) {
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("outside\n"), 0o600))
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "d/sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "d/sub/f"), []byte("f\n"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(dir, "d/out")))             // inside a tree to remove
	must(t, os.Symlink(outside, filepath.Join(dir, "outlink")))           // a link to remove
	must(t, os.Symlink(outside+"/secret", filepath.Join(dir, "movable"))) // a link to move
	must(t, os.Symlink(strings.Repeat("../", 30)+strings.TrimPrefix(outside, "/"), filepath.Join(dir, "dots")))
	r, err := safefs.OpenRoot(dir)
	must(t, err)
	defer r.Close()

	// Through a link on the way: it resolves inside the root, where there
	// is no such file.
	if err := r.Remove("dots/secret"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("remove dots/secret: %v, want not exist", err)
	}
	if err := r.Remove(outside + "/secret"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("remove %s/secret: %v, want not exist", outside, err)
	}
	if err := r.Rename("dots/secret", "/stolen"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("rename dots/secret: %v, want not exist", err)
	}
	must(t, r.Remove("outlink"))
	must(t, r.Remove("/../d"))
	must(t, r.Rename("movable", "/moved"))
	if fi, err := os.Lstat(filepath.Join(dir, "moved")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("moved: %v %v, want the link itself", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "outside\n" {
		t.Fatalf("the file outside: %q %v", b, err)
	}
	for _, n := range []string{"d", "outlink", "movable"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", n, err)
		}
	}
	if err := r.Remove("/"); err == nil {
		t.Error("removing the root itself was accepted")
	}
	if err := r.Remove("nothing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("remove nothing: %v", err)
	}
	// A directory is replaced only by an empty one.
	must(t, os.MkdirAll(filepath.Join(dir, "a"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "b/x"), 0o755))
	if err := r.Rename("a", "b"); !errors.Is(err, safefs.ErrExists) {
		t.Errorf("rename a over a non-empty b: %v, want ErrExists", err)
	}
}
