package cgroup_test

import (
	"context"
	"errors"
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

// TestRemoveKnownChildren removes a group whose children are named
// (the fast way, no listing), one with a child not named (the listing
// finds it), and one whose named child still holds a process (EBUSY,
// nothing removed that shouldn't be).
func TestRemoveKnownChildren(t *testing.T) {
	parent := testutil.CgroupParent(t)
	mk := func(p string) {
		t.Helper()
		if _, err := cgroup.Create(p); err != nil {
			t.Fatal(err)
		}
	}
	// Named children only; "keeper" was never made (absent is fine).
	env := filepath.Join(parent, "env")
	mk(env)
	mk(filepath.Join(env, "commands"))
	mk(filepath.Join(env, "guardians"))
	if !cgroup.RemoveKnown(cgroup.Open(env), "commands", "guardians", "keeper") {
		t.Fatal("the named children and the group were not removed without a listing")
	}
	if cgroup.Open(env).Exists() {
		t.Fatal("group still exists")
	}
	// A grandchild not named: the listing removes it, deepest first.
	mk(env)
	mk(filepath.Join(env, "commands"))
	mk(filepath.Join(env, "commands", "c1"))
	mk(filepath.Join(env, "guardians"))
	if cgroup.RemoveKnown(cgroup.Open(env), "commands", "guardians") {
		t.Fatal("the fast path reported a group with an unnamed grandchild removed")
	}
	if !cgroup.Open(env).Exists() {
		t.Fatal("the fast path removed a group that still had a child")
	}
	if err := cgroup.Open(env).Remove("commands", "guardians"); err != nil {
		t.Fatal(err)
	}
	if cgroup.Open(env).Exists() {
		t.Fatal("group with an unnamed grandchild still exists")
	}
	// A missing group is not an error.
	if err := cgroup.Open(env).Remove("commands"); err != nil {
		t.Fatalf("removing a missing group: %v", err)
	}
	// A named child with a live process: EBUSY after the listing's
	// retries; the busy child and the group stay, the empty sibling goes.
	mk(env)
	mk(filepath.Join(env, "commands"))
	busy := filepath.Join(env, "guardians")
	mk(busy)
	fd, err := cgroup.Open(busy).OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = cgroup.Open(env).Remove("commands", "guardians")
	}()
	err = cgroup.Open(env).Remove("commands", "guardians")
	if !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("removing a group with a live process: %v, want EBUSY", err)
	}
	if !cgroup.Open(busy).Exists() || !cgroup.Open(env).Exists() {
		t.Fatal("a busy group (or its parent) was removed")
	}
	if cgroup.Open(filepath.Join(env, "commands")).Exists() {
		t.Fatal("the empty sibling was left")
	}
}
