package watch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Dir reports what changed, below new subdirectories too, after a first
// "ready"; it ends when its directory is removed.
func TestDirReportsChanges(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "w")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	events := make(chan Event, 100)
	done := make(chan error, 1)
	go func() {
		done <- Dir(ctx, d, true, func(ev Event) { events <- ev })
		close(events)
	}()
	want := func(p, op string) {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("ended before %s %s", op, p)
				}
				if ev.Path == p && ev.Op == op {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no %s %s", op, p)
			}
		}
	}
	want("", "ready")
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	want("a", "create")
	// The new directory is watched: wait until a file in it is seen.
	for i := 0; ; i++ {
		if err := os.WriteFile(filepath.Join(root, "a", "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-events:
			if ev.Path == "a/f" {
				goto seen
			}
		case <-time.After(100 * time.Millisecond):
		}
		if i > 100 {
			t.Fatal("no event of a/f")
		}
	}
seen:
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Dir did not end when its directory was removed")
	}
}
