package registry

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// A durable commit syncs the WAL with fdatasync through the VFS shim's own
// read-only descriptor of it (decision 73), which Close releases. The
// first sync of a WAL this process created is the unix VFS's own (it also
// syncs the directory); every later one is an fdatasync.
func TestWALSyncIsFdatasync(t *testing.T) {
	if vfsName == "" {
		t.Fatal("the hostfork VFS is not registered")
	}
	dir := t.TempDir()
	base, data := walBaseSyncs(), walDataSyncs()
	d, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	wal := filepath.Join(dir, FileName+"-wal")
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e0")) }); err != nil {
		t.Fatal(err)
	}
	if n := walBaseSyncs() - base; n != 1 {
		t.Errorf("a new WAL's syncs left to the unix VFS: %d, want 1 (the first, with its directory)", n)
	}
	if walDataSyncs() == data {
		t.Errorf("no commit on the new WAL was synced with fdatasync")
	}
	base, data = walBaseSyncs(), walDataSyncs()
	for i := 1; i <= 3; i++ {
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv(fmt.Sprintf("e%d", i))) }); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := walDataSyncs()-data, walBaseSyncs()-base; n != 3 || m != 0 {
		t.Errorf("3 synced commits made %d fdatasyncs and %d other syncs of the WAL, want 3 and 0", n, m)
	}
	if len(walDescriptors(t, wal, true)) == 0 {
		t.Errorf("no read-only descriptor of %s is open: the shim syncs through none", wal)
	}
	d.Close()
	if fds := walDescriptors(t, wal, false); len(fds) != 0 {
		t.Errorf("descriptors of the WAL left open after Close: %v", fds)
	}

	// A new connection to the WAL that exists syncs it with fdatasync from
	// its first commit.
	d, err = Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	base, data = walBaseSyncs(), walDataSyncs()
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e4")) }); err != nil {
		t.Fatal(err)
	}
	if n, m := walDataSyncs()-data, walBaseSyncs()-base; n != 1 || m != 0 {
		t.Errorf("the first commit on an existing WAL made %d fdatasyncs and %d other syncs, want 1 and 0", n, m)
	}
	if _, err := d.Env(context.Background(), "e3"); err != nil {
		t.Errorf("a record committed before the reopen: %v", err)
	}
}

// walDescriptors lists this process's descriptors open on the file at path
// (only the read-only ones with readOnly).
func walDescriptors(t *testing.T, path string, readOnly bool) []string {
	t.Helper()
	want, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		st, err := os.Stat(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !os.SameFile(st, want) {
			continue
		}
		if readOnly {
			info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
			if err != nil {
				continue
			}
			var flags int
			for _, l := range strings.Split(string(info), "\n") {
				if v, ok := strings.CutPrefix(l, "flags:"); ok {
					fmt.Sscanf(strings.TrimSpace(v), "%o", &flags)
				}
			}
			if flags&3 != os.O_RDONLY {
				continue
			}
		}
		fds = append(fds, e.Name())
	}
	return fds
}

// A checkpoint keeps the WAL file and its size, and starts it again from
// its beginning in the file itself: the commits after it, also those of
// the next process (which rebuilds the WAL's index from the file), overwrite
// the file, so their syncs change no size (on a journaled filesystem, no
// journal commit). A WAL that a reader let grow past walTruncateBytes is
// truncated instead.
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

// The automatic checkpoint's restart reaches the WAL file (hf_wal_hook,
// decision 73): after the commit that checkpointed, the next process
// (every connection closed, the index rebuilt from the file) writes the
// WAL from its start instead of appending to the checkpointed frames.
func TestAutoCheckpointRestartsWALFile(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d := openIn(t, dir)
	defer func() { d.Close() }()
	// Commit until the automatic checkpoint copies pages into the
	// database file (it grows), and stop right there: that commit is the
	// "process's" last.
	dbSize := func() int64 { return fileSize(t, d.path) }
	restarts, initial := walRestarts(), dbSize()
	i := 0
	for ; dbSize() == initial; i++ {
		if i > 10*autocheckpointPages {
			t.Fatalf("no checkpoint after %d commits", i)
		}
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv(fmt.Sprintf("a%04d", i))) }); err != nil {
			t.Fatal(err)
		}
	}
	if walRestarts() == restarts {
		t.Errorf("the checkpoint after commit %d made no restart write", i)
	}
	before := fileSize(t, d.path+"-wal")
	d.Close()
	d = openIn(t, dir)
	for j := 0; j < 5; j++ {
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv(fmt.Sprintf("b%d", j))) }); err != nil {
			t.Fatal(err)
		}
	}
	if after := fileSize(t, d.path+"-wal"); after != before {
		t.Errorf("WAL grew from %d to %d bytes after the checkpoint: the next process appended to the checkpointed frames", before, after)
	}
	for _, id := range []string{"a0000", fmt.Sprintf("a%04d", i-1), "b4"} {
		if _, err := d.Env(ctx, id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
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
