package hostfork_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/spec"
)

// A daemon that double-forks and calls setsid is owned: stopping the
// environment ends it and the record shows the tree exited.
func TestSetsidDaemonIsOwned(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	pidfile := t.TempDir() + "/daemon.pid"
	cmd := env.Command("sh", "-c", "setsid sh -c 'echo $$ > "+pidfile+"; exec sleep 300' & exit 0")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := cmd.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.LeaderState != registry.Exited || *res.ExitCode != 0 {
		t.Fatalf("leader: %+v", res)
	}
	var pid int
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, _ := os.ReadFile(pidfile)
		if s := strings.TrimSpace(string(b)); s != "" {
			for _, c := range s {
				pid = pid*10 + int(c-'0')
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("daemon never wrote its pid")
		}
		time.Sleep(5 * time.Millisecond)
	}
	id, err := linux.IdentityOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	if r := cmd.Record(); r.TreeState != registry.Live {
		t.Fatalf("tree should still be live while the daemon runs: %s", r.TreeState)
	}
	if err := env.Stop(ctx, hostfork.StopOptions{Reason: hostfork.ReasonUser}); err != nil {
		t.Fatal(err)
	}
	tree, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tree.TreeState != registry.Exited || tree.StopReason != hostfork.ReasonUser {
		t.Fatalf("tree: %+v", tree)
	}
	if linux.Assess(id) != linux.Gone {
		t.Fatalf("daemon %d survived the stop", pid)
	}
	rows, err := h.List(ctx, hostfork.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Fatalf("ps still lists: %+v", rows)
	}
}

// Leader exit and tree exit are separate, recorded events.
func TestLeaderExitBeforeTreeExit(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("sh", "-c", "sleep 1 & exit 3")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := cmd.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == nil || *res.ExitCode != 3 || res.TreeState == registry.Exited {
		t.Fatalf("at leader exit: exit %v tree %s", res.ExitCode, res.TreeState)
	}
	tree, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tree.TreeState != registry.Exited || tree.TreeExitedAt == nil || tree.LeaderExitedAt == nil || !tree.TreeExitedAt.After(*tree.LeaderExitedAt) {
		t.Fatalf("tree: %+v", tree)
	}
	if tree.StopReason != "" {
		t.Fatalf("nobody stopped it, yet stop reason %q", tree.StopReason)
	}
}
