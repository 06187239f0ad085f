package registry

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mattn/go-sqlite3"
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

// The WAL is checkpointed at autocheckpointPages, not SQLite's 1000: every
// process rebuilds the WAL index from the whole WAL at its first statement,
// so the WAL's length is a cost of every CLI call. SQLite reuses the file
// from its start after a checkpoint, so its size is the longest it has
// been: the threshold plus the commit that crossed it.
func TestWALStaysShort(t *testing.T) {
	d := open(t)
	for i := 0; i < 3*autocheckpointPages; i++ {
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv(fmt.Sprintf("e%04d", i))) }); err != nil {
			t.Fatal(err)
		}
	}
	// Each commit writes at least one frame: three times what the WAL
	// may hold, and fewer than SQLite's default threshold.
	st, err := os.Stat(d.path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	const frame = 4096 + 24
	if max := int64(32 + (autocheckpointPages+32)*frame); st.Size() > max {
		t.Fatalf("WAL is %d bytes (%d frames), over the %d-page threshold", st.Size(), (st.Size()-32)/frame, autocheckpointPages)
	}
}

// Each connection keeps the statements it prepared: a statement run twice
// is compiled once. The cache is observed in SQLite itself: after the
// reads finished, their statements are still there, reset, not finalized;
// and the registry's distinct statements fit in the cache.
func TestStatementCache(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e")) }); err != nil {
		t.Fatal(err)
	}
	d.db.SetMaxOpenConns(1)
	for i := 0; i < 3; i++ {
		if _, err := d.Env(ctx, "e"); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Intents(ctx, IntentFilter{EnvID: "e", Open: true}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	live := 0
	if err := conn.Raw(func(dc any) error {
		live = liveStatements(dc.(*sqlite3.SQLiteConn))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if live < 2 {
		t.Fatalf("%d prepared statements kept after the reads: the statement cache is off", live)
	}
	if live > stmtCacheSize {
		t.Fatalf("%d prepared statements kept, over the cache's %d", live, stmtCacheSize)
	}
}
