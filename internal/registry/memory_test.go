package registry

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestSQLiteArena: a build with memsys5 (scripts/build.sh) allocates
// SQLite's memory from the arena, spills what the arena can't hold to the
// system allocator, and loses nothing either way; a build without it uses
// the system allocator.
func TestSQLiteArena(t *testing.T) {
	a := Arena()
	if a.Err != nil {
		t.Fatal(a.Err)
	}
	if a.Engaged != sqliteHasMemsys5() {
		t.Fatalf("arena engaged = %v, SQLite compiled with memsys5 = %v", a.Engaged, sqliteHasMemsys5())
	}
	if !a.Engaged {
		t.Log("SQLite built without SQLITE_ENABLE_MEMSYS5 (a plain go build): the system allocator; the round trips below still run")
	} else if a.Bytes < 1<<20 || a.Largest < 1<<20 || a.Largest > a.Bytes {
		t.Fatalf("arena of %d bytes, largest block %d", a.Bytes, a.Largest)
	}
	ctx := context.Background()
	d := open(t)
	resetHighwater()
	before := Arena()
	for i := range 20 {
		id := fmt.Sprintf("arena%02d", i)
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv(id)) }); err != nil {
			t.Fatal(err)
		}
		if e, err := d.Env(ctx, id); err != nil || e.ID != id {
			t.Fatalf("env %s: %v %v", id, e, err)
		}
	}
	if n := Arena().Spills - before.Spills; n != 0 {
		t.Errorf("ordinary commits and reads spilled %d allocations out of the arena", n)
	}

	// One value larger than the arena's largest block: bound, stored and
	// read back.
	size := 12 << 20
	if a.Engaged {
		size = int(a.Largest) * 3
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if _, err := d.db.ExecContext(ctx, `CREATE TABLE arena_test (v BLOB)`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.ExecContext(ctx, `INSERT INTO arena_test (v) VALUES (?)`, big); err != nil {
		t.Fatal(err)
	}
	var back []byte
	if err := d.db.QueryRowContext(ctx, `SELECT v FROM arena_test`).Scan(&back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, big) {
		t.Fatalf("a %d-byte value came back as %d bytes, or changed", len(big), len(back))
	}
	mid := Arena()
	if a.Engaged && mid.Spills == before.Spills {
		t.Errorf("a %d-byte value with a largest block of %d made no spill", size, a.Largest)
	}
	// The value is bound, stored and read back: a few copies at once, each
	// of about its size (a spill is not rounded up to a power of two).
	if mid.Highwater > before.Used+int64(4*size) {
		t.Errorf("SQLite's memory peaked at %d bytes for a %d-byte value (%d in use before)", mid.Highwater, size, before.Used)
	}

	// A value that grows past the largest block by reallocation (SQLite's
	// string accumulator doubles its buffer: first in the arena, then
	// moved out), compared whole.
	rows := size / 64
	var got string
	err := d.db.QueryRowContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < ?)
		SELECT group_concat(printf('%064d', i), '') FROM c`, rows).Scan(&got)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= rows; i++ {
		fmt.Fprintf(&want, "%064d", i)
	}
	if got != want.String() {
		t.Fatalf("group_concat of %d rows: %d bytes, not the %d expected, or changed", rows, len(got), want.Len())
	}
	after := Arena()
	if a.Engaged && after.Moves == mid.Moves {
		t.Errorf("a value grown to %d bytes never moved out of the arena (largest block %d)", len(got), a.Largest)
	}
	// What the big values took is given back.
	if after.Used > before.Used+4<<20 {
		t.Errorf("SQLite holds %d bytes after the big values, %d before", after.Used, before.Used)
	}
	t.Logf("arena %+v", after)
}

// TestSQLiteArenaConcurrent: the pool's connections allocate at once,
// small values from the arena and large ones past it, and every value
// comes back as written.
func TestSQLiteArenaConcurrent(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	if _, err := d.db.ExecContext(ctx, `CREATE TABLE arena_conc (k INTEGER PRIMARY KEY, v BLOB)`); err != nil {
		t.Fatal(err)
	}
	sizes := []int{100, 3000, 70_000, 1 << 20, 5 << 20}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				k := w*100 + i
				v := bytes.Repeat([]byte{byte(k), byte(k >> 8), 0x5a}, sizes[(w+i)%len(sizes)]/3)
				if _, err := d.db.ExecContext(ctx, `INSERT INTO arena_conc (k, v) VALUES (?, ?)`, k, v); err != nil {
					errc <- err
					return
				}
				var back []byte
				if err := d.db.QueryRowContext(ctx, `SELECT v FROM arena_conc WHERE k = ?`, k).Scan(&back); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(back, v) {
					errc <- fmt.Errorf("value %d: %d bytes written, %d read back, or changed", k, len(v), len(back))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	var n int
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM arena_conc`).Scan(&n); err != nil || n != 80 {
		t.Fatalf("%d values stored (%v), want 80", n, err)
	}
	t.Logf("arena %+v", Arena())
}
