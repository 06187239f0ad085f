package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// testEngine opens an engine on a new store with its own cgroup parent
// (opts.Root and opts.CgroupParent are filled in); both go at the end.
func testEngine(t *testing.T, opts Options) (*Engine, *api.Env) {
	t.Helper()
	testutil.RequireRoot(t)
	opts.CgroupParent = testutil.CgroupParent(t)
	opts.Root = filepath.Join(t.TempDir(), "store")
	ctx := context.Background()
	e, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		time.Sleep(100 * time.Millisecond) // a watcher's last manifest write
	})
	if !e.Capabilities().Cgroup2 {
		testutil.Skip(t, "no cgroup2 tier: "+e.Capabilities().Cgroup2Reason)
	}
	return e, benchEnv(t, e)
}

// TestStartPaths runs a command in an existing environment by both
// launches: the early one (the guardian registered in the reservation, its
// files unnamed until then; decision 56) and the three-commit one used where
// the store can't make unnamed files. Both leave the same record and files.
func TestStartPaths(t *testing.T) {
	for _, early := range []bool{true, false} {
		name := "early"
		if !early {
			name = "three-commits"
		}
		t.Run(name, func(t *testing.T) {
			noEarlyLaunch = !early
			defer func() { noEarlyLaunch = false }()
			e, env := testEngine(t, Options{})
			ctx := context.Background()
			r, err := e.Start(ctx, env.ID, &CommandSpec{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
			if err != nil {
				t.Fatal(err)
			}
			<-r.TreeDone()
			if err := r.RecordErr(); err != nil {
				t.Fatal(err)
			}
			rec, err := e.reg.Command(ctx, r.ID())
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != api.CommandExited || rec.ExitCode == nil || *rec.ExitCode != 3 || rec.TreeState != api.PhaseExited {
				t.Fatalf("record: state %s, exit %v, tree %s, error %q", rec.State, rec.ExitCode, rec.TreeState, rec.Error)
			}
			for path, want := range map[string]string{rec.StdoutPath: "out\n", rec.StderrPath: "err\n"} {
				b, err := os.ReadFile(path)
				if err != nil || string(b) != want {
					t.Errorf("%s: %q, %v (want %q)", path, b, err, want)
				}
			}
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(rec.Dir, "receipt"), &st); err != nil || st.Ino != rec.ProofIno || st.Dev != rec.ProofDev || st.Mode&0o777 != 0o600 || st.Nlink != 1 {
				t.Errorf("receipt: %+v, %v; registered %d/%d", st, err, rec.ProofDev, rec.ProofIno)
			}
			if rec.CgroupInode == 0 {
				t.Error("the command's cgroup inode was not recorded")
			}
			ins, err := e.reg.Intents(ctx, registry.IntentFilter{CommandID: rec.ID})
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range ins {
				if in.State == registry.IntentPending {
					t.Errorf("intent %s %s is still pending after the result", in.Kind, in.Target)
				}
			}
		})
	}
}

// TestStartEarlyFailureLeavesNothing: a guardian that can't start (its
// executable is missing) fails the early launch before anything is
// recorded or named: no command record, nothing in the environment's
// commands directory.
func TestStartEarlyFailureLeavesNothing(t *testing.T) {
	e, env := testEngine(t, Options{Exe: "/nonexistent/hostfork"})
	ctx := context.Background()
	if _, err := e.Start(ctx, env.ID, &CommandSpec{Argv: []string{"true"}}); err == nil {
		t.Fatal("Start succeeded without a guardian executable")
	}
	cmds, err := e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 0 {
		t.Errorf("a failed early launch left %d command records", len(cmds))
	}
	ents, err := os.ReadDir(filepath.Join(env.RunDir, "commands"))
	if err != nil || len(ents) != 0 {
		t.Errorf("the commands directory holds %v (%v)", ents, err)
	}
}

// A release the guardian can't be given (a message over the protocol's
// bound) is refused before anything starts: Start fails with the reason,
// and the command's record says so at once, final, from the empty receipt
// (decision 60), instead of waiting for a reader to settle it.
func TestRefusedReleaseIsRecorded(t *testing.T) {
	for _, early := range []bool{true, false} {
		t.Run(map[bool]string{true: "early", false: "three-commit"}[early], func(t *testing.T) {
			old := noEarlyLaunch
			noEarlyLaunch = !early
			t.Cleanup(func() { noEarlyLaunch = old })
			e, env := testEngine(t, Options{})
			ctx := context.Background()
			huge := "X=" + strings.Repeat("x", 17<<20)
			_, err := e.Start(ctx, env.ID, &CommandSpec{Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin", huge}})
			if err == nil || !strings.Contains(err.Error(), "releasing the command") {
				t.Fatalf("Start with a 17 MiB environment: %v", err)
			}
			cmds, err := e.reg.Commands(ctx, registry.CommandQuery{Env: env.ID})
			if err != nil || len(cmds) != 1 {
				t.Fatalf("%d commands, %v", len(cmds), err)
			}
			c := cmds[0]
			if c.State != api.CommandFailed || c.Workload != nil || c.ExitCode != nil || !strings.Contains(c.Error, "more than") ||
				c.TreeEvidence != "never released (its receipt is empty)" || c.StoppedByHostfork {
				t.Fatalf("record %+v", c)
			}
			if b, err := os.ReadFile(filepath.Join(c.Dir, "receipt")); err != nil || len(b) != 0 {
				t.Fatalf("receipt %q, %v", b, err)
			}
		})
	}
}
