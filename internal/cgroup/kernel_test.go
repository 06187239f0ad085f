package cgroup_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

func TestCloneIntoKillFreezeRemove(t *testing.T) {
	parent := testutil.CgroupParent(t)
	g, err := cgroup.Create(filepath.Join(parent, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cgroup.Create(g.Path); err == nil {
		t.Fatal("second create of the same group was adopted")
	}
	fd, err := g.OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	// A daemon that double-forks and calls setsid.
	cmd := exec.Command("sh", "-c", "setsid sh -c 'sleep 300 & sleep 300' & sleep 300")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		pids, _ := g.Procs()
		if len(pids) >= 4 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("tree never reached 4 processes: %v", pids)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := g.SetFrozen(true); err != nil {
		t.Fatal(err)
	}
	if _, err := g.WaitEvent(ctx, func(e cgroup.Events) bool { return e.Frozen }); err != nil {
		t.Fatal(err)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := g.WaitEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if g.Exists() {
		t.Fatal("group still exists")
	}
}
