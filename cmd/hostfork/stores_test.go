package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTwoStoresShareACgroupParent: two stores may share a cgroup parent
// (docs/security.md, "Stores and cgroup parents"). Each touches only the
// groups its own ledger names: another store's reap, gc and stop --all
// leave this one's environment, its group and its command alone.
func TestTwoStoresShareACgroupParent(t *testing.T) {
	a := newCLI(t)
	b := a.with(t)
	b.root = filepath.Join(t.TempDir(), "store-b")
	env := strings.TrimSpace(a.mustRun("run", "--detach", "--ttl", "5m", "--", "sleep", "300").stdout)
	group := a.status(env)["cgroup_path"].(string)
	if filepath.Dir(group) != a.parent {
		t.Fatalf("environment %s's group %s is not under the shared parent %s", env, group, a.parent)
	}
	b.mustRun("run", "--", "true")
	b.mustRun("run", "--detach", "--ttl", "5m", "--", "sleep", "300")
	b.mustRun("stop", "--all")
	b.mustRun("reap")
	b.mustRun("gc", "--retain-trees", "0s", "--retain-evidence", "0s")
	if s := a.status(env); s["state"] != "active" {
		t.Errorf("store a's environment after store b's stop --all, reap and gc: %v (%v)", s["state"], s["stop_reason"])
	}
	if _, err := os.Stat(group); err != nil {
		t.Errorf("store a's group: %v", err)
	}
	if rows := a.ps(false); len(rows) != 1 || rows[0].State != "alive" {
		t.Errorf("store a's commands: %+v, want its one sleep running", rows)
	}
	a.mustRun("stop", env)
}
