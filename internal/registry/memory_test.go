package registry

import (
	"bytes"
	"context"
	"fmt"
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
	} else if a.Bytes < 1<<20 {
		t.Fatalf("arena of %d bytes", a.Bytes)
	}
	ctx := context.Background()
	d := open(t)
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

	// One value larger than the arena: bound, stored and read back.
	size := 12 << 20
	if a.Bytes > 0 {
		size = int(a.Bytes) * 3 / 2
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

	// A value that grows past the arena by reallocation (SQLite's string
	// accumulator doubles its buffer: first in the arena, then moved out).
	rows := size / 64
	var n int
	var head, tail string
	err := d.db.QueryRowContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < ?)
		SELECT length(s), substr(s, 1, 64), substr(s, -64) FROM (SELECT group_concat(printf('%064d', i), '') AS s FROM c)`, rows).Scan(&n, &head, &tail)
	if err != nil {
		t.Fatal(err)
	}
	if n != rows*64 || head != fmt.Sprintf("%064d", 1) || tail != fmt.Sprintf("%064d", rows) {
		t.Fatalf("group_concat of %d rows: length %d, head %q, tail %q", rows, n, head, tail)
	}
	after := Arena()
	if a.Engaged && after.Spills == before.Spills {
		t.Errorf("values of %d bytes in an arena of %d made no spill", size, a.Bytes)
	}
	if after.Highwater < int64(size) {
		t.Errorf("SQLite's high-water mark %d is below the %d-byte value it held", after.Highwater, size)
	}
	// What the big values took is given back.
	if after.Used > before.Used+4<<20 {
		t.Errorf("SQLite holds %d bytes after the big values, %d before", after.Used, before.Used)
	}
	t.Logf("arena %+v", after)
}
