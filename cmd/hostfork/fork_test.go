package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cli"
)

// TestForkCLI: hostfork fork refuses a count of 0 or 10000 naming the
// limit (exit 122, nothing made), and forks a stopped environment without
// a freeze into detached children that hold its files, each with its own
// limits, view and deadline.
func TestForkCLI(t *testing.T) {
	c := newCLI(t)
	dir := filepath.Join(filepath.Dir(c.root), "scratch")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := strings.TrimSpace(c.mustRun(slices.Concat([]string{"create", "--ttl", "5m", "--memory", "64M"}, overlayArgs(t, dir))...).stdout)
	c.mustRun("exec", env, "--", "sh", "-c", "echo mine > "+filepath.Join(dir, "target", "made"))
	for _, n := range []string{"0", "10000"} {
		r := c.run("fork", env, "--count", n)
		if r.code != cli.ExitUsage || !strings.Contains(r.stderr, "64") {
			t.Fatalf("fork --count %s: exit %d, stderr %q; want %d naming the limit", n, r.code, r.stderr, cli.ExitUsage)
		}
	}
	if got := c.query("select count(*) from envs"); got != "1" {
		t.Fatalf("a refused fork made environments: %s in the registry", got)
	}
	c.mustRun("stop", env)
	out := c.mustRun("fork", env, "--count", "2", "--label", "try=a", "--ttl", "1m", "--json").stdout
	var kids []api.Env
	if err := json.Unmarshal([]byte(out), &kids); err != nil || len(kids) != 2 {
		t.Fatalf("fork --json: %v: %s", err, out)
	}
	for _, k := range kids {
		if k.Fork == nil || k.Fork.Parent != env || k.Fork.Frozen || k.OwnerExit != api.OwnerExitDetach || k.Labels["try"] != "a" || k.State != api.EnvActive {
			t.Fatalf("child %s: %+v (fork %+v)", k.ID, k, k.Fork)
		}
		// A full environment: its own limit groups, cgroup, keeper and
		// deadline (--ttl).
		if len(k.Limits) == 0 || k.Keeper == nil || k.CgroupPath == "" || !strings.Contains(k.CgroupPath, k.ID) || k.DeadlineAt == nil || k.TTL.D().Minutes() != 1 {
			t.Fatalf("child %s: limits %s keeper %v cgroup %s deadline %v ttl %s", k.ID, k.Limits, k.Keeper, k.CgroupPath, k.DeadlineAt, k.TTL)
		}
		b, err := os.ReadFile(filepath.Join(k.Trees[0].HostPath, "made"))
		if err != nil || string(b) != "mine\n" {
			t.Fatalf("child %s's upper: %q, %v", k.ID, b, err)
		}
		c.mustRun("stop", k.ID)
	}
}
