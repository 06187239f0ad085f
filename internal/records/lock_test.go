package records

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/lockfile"
)

// envLock takes the environment's lock or says why not; a lock file it
// can't open (here a symbolic link in its place) is an error, never a lock
// reported taken (issue 35, §2), and a held lock is ErrBusy after the wait.
func TestEnvLock(t *testing.T) {
	run := t.TempDir()
	unlock, err := EnvLock(run, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnvLock(run, 20*time.Millisecond); !errors.Is(err, lockfile.ErrBusy) {
		t.Fatalf("a held lock: %v", err)
	}
	unlock()
	if unlock, err = EnvLock(run, time.Second); err != nil {
		t.Fatalf("after release: %v", err)
	}
	unlock()

	bad := t.TempDir()
	if err := os.Symlink("/nonexistent/target", filepath.Join(bad, "reap.lock")); err != nil {
		t.Fatal(err)
	}
	if unlock, err := EnvLock(bad, time.Second); err == nil || errors.Is(err, lockfile.ErrBusy) {
		if unlock != nil {
			unlock()
		}
		t.Fatalf("a lock file that can't be opened: want an error that is not ErrBusy, got %v", err)
	}
	// A run directory not made yet: its parent is locked instead.
	if unlock, err := EnvLock(filepath.Join(run, "missing"), time.Second); err != nil {
		t.Fatalf("missing run directory: %v", err)
	} else {
		unlock()
	}
}
