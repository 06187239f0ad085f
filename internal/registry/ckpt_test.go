package registry

import (
	"context"
	"fmt"
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
	// hostfork_statements() counts the connection's statements, itself
	// included (driver.go).
	var live int
	if err := d.db.QueryRowContext(ctx, "SELECT hostfork_statements() - 1").Scan(&live); err != nil {
		t.Fatal(err)
	}
	if live < 2 {
		t.Fatalf("%d prepared statements kept after the reads: the statement cache is off", live)
	}
	if live > stmtCacheSize {
		t.Fatalf("%d prepared statements kept, over the cache's %d", live, stmtCacheSize)
	}
}

// A checkpoint keeps the WAL file and its size, and starts it again from
// its beginning in the file itself: the commits after it, also those of
// the next process (which rebuilds the WAL's index from the file), overwrite
// the file: their syncs change no size and allocate no blocks. A WAL that
// a reader let grow past walTruncateBytes is truncated instead.
func TestCheckpointKeepsWALInPlace(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d := openIn(t, dir)
	defer func() { d.Close() }()
	wal := d.path + "-wal"
	size := func() int64 { return fileSize(t, wal) }
	for i := 0; i < 20; i++ {
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv(fmt.Sprintf("a%02d", i))) }); err != nil {
			t.Fatal(err)
		}
	}
	grown := size()
	if err := d.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if s := size(); s != grown {
		t.Fatalf("WAL of %d bytes is %d after a checkpoint, want it kept", grown, s)
	}
	// The next process: every connection closed, so the next open
	// rebuilds the index from the file.
	d.Close()
	d = openIn(t, dir)
	for i := 0; i < 5; i++ {
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv(fmt.Sprintf("b%02d", i))) }); err != nil {
			t.Fatal(err)
		}
	}
	if s := size(); s != grown {
		t.Errorf("WAL grew from %d to %d bytes: the commits of the next process did not overwrite it from its start", grown, s)
	}
	for _, id := range []string{"a07", "b03"} {
		if _, err := d.Env(ctx, id); err != nil {
			t.Errorf("a record committed before the checkpoint or after it: %v", err)
		}
	}

	// A reader holds its snapshot: no automatic checkpoint can restart
	// the WAL, which grows past walTruncateBytes.
	// (A deferred transaction on a connection of its own: the registry's
	// transactions begin IMMEDIATE, as writers.)
	reader, err := d.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, "SELECT count(*) FROM envs").Scan(&n); err != nil {
		t.Fatal(err)
	}
	for i := 0; size() <= walTruncateBytes; i++ {
		if i > 20000 {
			t.Fatalf("WAL still %d bytes after %d commits", size(), i)
		}
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv(fmt.Sprintf("c%05d", i))) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reader.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := d.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if s := size(); s != 0 {
		t.Errorf("WAL of more than %d bytes is %d after a checkpoint, want it truncated", walTruncateBytes, s)
	}
	if _, err := d.Env(ctx, "c00010"); err != nil {
		t.Errorf("a record checkpointed into the database: %v", err)
	}
}

// fileSize is the size of the file at path.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// openIn opens the registry of the store at dir; the caller closes it.
func openIn(t *testing.T, dir string) *DB {
	t.Helper()
	d, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
