package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// RemoveUnrecorded takes what an interrupted Prepare left in a private
// area (a snapshot included), and refuses a destination it can't have
// made: in an area others can write, owned by someone else, or a link.
func TestRemoveUnrecorded(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	mnt := testutil.LoopBtrfs(t, "")
	base := filepath.Join(mnt, "baseline")
	if err := storage.CreateSubvolume(base); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = storage.DestroySubvolumeForTest(base) })
	writeFiles(t, base, map[string]string{"a": "alpha\n"})
	pool, err := storage.PoolDir(mnt, "pool")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, b := range []storage.Backend{storage.Btrfs{}, storage.Copy{}, storage.Overlay{}} {
		dest := filepath.Join(pool.Path(), "unrecorded-"+string(b.Kind()))
		if _, err := b.Prepare(ctx, storage.Request{Dest: dest, Source: base, Pool: pool}); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, dest, map[string]string{"half/written": "x"})
		if err := storage.RemoveUnrecorded(ctx, dest, ""); err != nil {
			t.Errorf("RemoveUnrecorded(%s): %v", dest, err)
		}
		if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there: %v", dest, err)
		}
		if err := storage.RemoveUnrecorded(ctx, dest, ""); err != nil {
			t.Errorf("RemoveUnrecorded of a missing destination: %v", err)
		}
	}
	if _, err := storage.InspectSubvolume(base); err != nil {
		t.Errorf("the baseline: %v", err)
	}

	open := filepath.Join(mnt, "open")
	theirs := filepath.Join(pool.Path(), "theirs")
	for _, p := range []string{open, filepath.Join(open, "d"), theirs} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(theirs, filepath.Join(pool.Path(), "link")); err != nil {
		t.Fatal(err)
	}
	for _, dest := range []string{filepath.Join(open, "d"), theirs, filepath.Join(pool.Path(), "link")} {
		if err := storage.RemoveUnrecorded(ctx, dest, ""); err == nil {
			t.Errorf("RemoveUnrecorded(%s): no error", dest)
		}
		if _, err := os.Lstat(dest); err != nil {
			t.Errorf("a refused RemoveUnrecorded removed %s", dest)
		}
	}
}
