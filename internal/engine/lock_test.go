package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/lockfile"
)

// envLock takes the environment's lock or says why not; a lock file it
// can't open (here a symbolic link in its place) is an error, never a lock
// reported taken (issue 35, §2), and a held lock is ErrBusy after the wait.
func TestEnvLock(t *testing.T) {
	run := t.TempDir()
	unlock, err := envLock(run, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envLock(run, 20*time.Millisecond); !errors.Is(err, lockfile.ErrBusy) {
		t.Fatalf("a held lock: %v", err)
	}
	unlock()
	if unlock, err = envLock(run, time.Second); err != nil {
		t.Fatalf("after release: %v", err)
	}
	unlock()

	bad := t.TempDir()
	if err := os.Symlink("/nonexistent/target", filepath.Join(bad, "reap.lock")); err != nil {
		t.Fatal(err)
	}
	if unlock, err := envLock(bad, time.Second); err == nil || errors.Is(err, lockfile.ErrBusy) {
		if unlock != nil {
			unlock()
		}
		t.Fatalf("a lock file that can't be opened: want an error that is not ErrBusy, got %v", err)
	}
	// A run directory not made yet: its parent is locked instead.
	if unlock, err := envLock(filepath.Join(run, "missing"), time.Second); err != nil {
		t.Fatalf("missing run directory: %v", err)
	} else {
		unlock()
	}
}

// A stop a reap attempted is reported done only when it finished; one
// that did not is the stop-failed action and pending, with its reason
// (issue 39, item 10).
func TestReportStop(t *testing.T) {
	var rep api.ReapReport
	reportStop(&rep, "e1", "", "completed-stop", "deadline", nil)
	reportStop(&rep, "e1", "c1", "completed-stop", "user", errors.New("tree is live: unverified"))
	if len(rep.Actions) != 2 || rep.Actions[0].Action != "completed-stop" || rep.Actions[1].Action != api.ReapStopFailed {
		t.Fatalf("actions: %+v", rep.Actions)
	}
	if len(rep.Pending) != 1 || rep.Pending[0].What != "command c1" || !strings.Contains(rep.Pending[0].Reason, "did not finish: tree is live") {
		t.Fatalf("pending: %+v", rep.Pending)
	}
}
