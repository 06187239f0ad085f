package registry

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Closing the last connection leaves the WAL in place (no checkpoint per
// process): the next process appends to it instead of recreating it.
func TestNoCheckpointOnClose(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e")) }); err != nil {
		t.Fatal(err)
	}
	d.Close()
	st, err := os.Stat(filepath.Join(dir, FileName+"-wal"))
	if err != nil || st.Size() == 0 {
		t.Fatalf("WAL after close: %v (size %v)", err, st)
	}
	d, err = Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Env(context.Background(), "e"); err != nil {
		t.Fatal(err)
	}
	if err := d.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
}
