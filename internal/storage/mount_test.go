package storage_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/storage/storagetest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

func TestMountApplyErrors(t *testing.T) {
	m := storage.Mount{Type: "bind", Source: t.TempDir(), Target: "../escape"}
	if err := m.Apply(t.TempDir()); !errors.Is(err, storage.ErrInvalidRequest) {
		t.Errorf("target outside the root: %v, want ErrInvalidRequest", err)
	}
	m = storage.Mount{Type: "bind", Source: filepath.Join(t.TempDir(), "missing")}
	var pe *os.PathError
	if err := m.Apply(t.TempDir()); !errors.As(err, &pe) {
		t.Errorf("bind of a missing source: %v, want *os.PathError", err)
	}
	if err := storage.Unmount(filepath.Join(t.TempDir(), "missing"), 0); !errors.As(err, &pe) {
		t.Errorf("Unmount of a missing path: %v, want *os.PathError", err)
	}
}

// Read-only binds need a second, remounting mount(2); the view sees the
// files but can't write them.
func TestMountReadOnlyBind(t *testing.T) {
	testutil.RequireRoot(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"sub/f": "data\n"})
	ms := []storage.Mount{
		{Type: "bind", Source: src, Options: []string{"bind", "ro"}},
	}
	out := storagetest.RunInView(t, ms, `cat sub/f; if (echo x > sub/f) 2>/dev/null; then echo writable; else echo refused; fi`)
	if out != "data\nrefused\n" {
		t.Errorf("view: %q", out)
	}
	if got := readFile(t, filepath.Join(src, "sub/f")); got != "data\n" {
		t.Errorf("source changed: %q", got)
	}
}
