package watch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A write wakes a waiter at once (well before its max), a rename into a
// watched directory too, and done and ctx end a wait with their errors.
func TestWait(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "log")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w := New(f, dir)
	defer w.Close()
	// Each change is made by a goroutine the test joins before it goes
	// on, so nothing writes into the directory after the test ends.
	change := func(fn func()) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(20 * time.Millisecond)
			fn()
		}()
		return done
	}
	wrote := change(func() { _ = os.WriteFile(f, []byte("x"), 0o600) })
	start := time.Now()
	if err := w.Wait(context.Background(), nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("a write did not wake the waiter (%v)", d)
	}
	<-wrote
	time.Sleep(10 * time.Millisecond)
	w.drain() // the write's last events, so the next wait needs a new one
	renamed := change(func() {
		tmp := filepath.Join(dir, ".new")
		_ = os.WriteFile(tmp, []byte("y"), 0o600)
		_ = os.Rename(tmp, filepath.Join(dir, "other"))
	})
	if err := w.Wait(context.Background(), nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	<-renamed
	done := make(chan struct{})
	close(done)
	if err := w.Wait(context.Background(), done, time.Minute); !errors.Is(err, ErrDone) {
		t.Fatalf("done: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Wait(ctx, nil, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("ctx: %v", err)
	}
	// Nothing happens: the wait ends at max with nil.
	if err := w.Wait(context.Background(), nil, 60*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// Changes signals a consumer on a channel when the file is written.
func TestChanges(t *testing.T) {
	f := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := New(f).Changes(ctx, time.Minute)
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no change signalled")
	}
}
