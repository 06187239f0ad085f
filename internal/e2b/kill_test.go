package e2b_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/e2b/e2btest"
)

// TestKillRunningWithStalePauseMark: kill writes no mark for a running
// sandbox without autoPause (decision 150), so it must clear the mark of
// a pause that crashed between writing "paused" and its stop: killed, the
// sandbox is gone, not paused. It runs twice: through the server's cache
// of live sandboxes, and after a restart (the cache empty: the labels
// are read).
func TestKillRunningWithStalePauseMark(t *testing.T) {
	f := e2btest.Start(t, e2btest.Options{})
	for _, restart := range []bool{false, true} {
		id := ok(t, "create", batch(t, f, e2btest.SDK, c{Call: []string{"create", "base", "120000"}})[0]).ID
		mark := filepath.Join(f.Root, "e2b", "state", id)
		if err := os.MkdirAll(filepath.Dir(mark), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mark, []byte("paused\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if restart {
			f.Restart(t)
		}
		r := batch(t, f, e2btest.SDK, c{Call: []string{"info", id}}, c{Call: []string{"kill", id}},
			c{Call: []string{"info", id}}, c{Call: []string{"list"}})
		if info := ok(t, "info", r[0]); info.State != "running" {
			t.Errorf("restart %v: a running sandbox with a stale mark: %s, want running", restart, info.State)
		}
		if r[1].Killed == nil || !*r[1].Killed {
			t.Errorf("restart %v: kill: %+v, want true", restart, r[1])
		}
		if r[2].Error != "SandboxNotFoundError" {
			t.Errorf("restart %v: getInfo after the kill: %+v, want SandboxNotFoundError", restart, r[2])
		}
		if slices.Contains(ids(ok(t, "list", r[3]).List), id) {
			t.Errorf("restart %v: the killed sandbox %s is still listed", restart, id)
		}
		if _, err := os.Stat(mark); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("restart %v: the stale mark is still there: %v", restart, err)
		}
		if envs := envsOf(t, f, id); len(envs) != 1 || envs[0].State != api.EnvStopped || envs[0].StopReason != api.ReasonUser {
			t.Errorf("restart %v: the killed sandbox's environments: %+v", restart, envs)
		}
	}
}
