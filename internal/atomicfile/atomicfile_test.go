package atomicfile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// The new content replaces the old with the mode asked for, and nothing
// else stays in the directory.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, c := range []string{"first\n", "second, longer\n", ""} {
		if err := WriteFile(p, []byte(c), 0o640); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != c {
			t.Fatalf("read %q %v, want %q", b, err, c)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("entries left: %v", ents)
	}
}

// On a full filesystem the write fails with ENOSPC, the old content stays
// whole (never an empty file) and no temporary file is left (issue 39,
// item 6: an empty stop-decision file).
func TestWriteFileFull(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	p := filepath.Join(dir, "decision")
	if err := WriteFile(p, []byte("user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Fill the filesystem.
	fill, _ := os.Create(filepath.Join(dir, "fill"))
	_, _ = fill.Write(make([]byte, 1<<20))
	fill.Close()
	err := WriteFile(p, []byte(strings.Repeat("x", 32<<10)), 0o600)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("want ENOSPC, got %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "user\n" {
		t.Errorf("the old content is gone: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("entries: %v", ents)
	}
}
