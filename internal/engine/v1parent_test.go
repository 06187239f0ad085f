package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/planner"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// TestV1GroupsMirrorTheParent: on a host whose memory controller is on
// cgroup v1 (hybrid), an environment with a memory limit gets its v1
// group under the engine's cgroup2 parent's path, not under the shared
// default "hostfork", and the test's cleanup can remove that parent.
func TestV1GroupsMirrorTheParent(t *testing.T) {
	e, _ := testEngine(t, Options{})
	ctx := context.Background()
	p, err := e.Plan(ctx, spec.Environment{Lifetime: spec.Lifetime{UntilStopped: true}, Limits: spec.Limits{Memory: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	var mech string
	for _, l := range p.Limits {
		if l.Resource == "memory" {
			mech = l.Mechanism
		}
	}
	if mech != "cgroup1" {
		testutil.Skip(t, "the memory limit is not on cgroup v1 here (mechanism "+mech+"): nothing to mirror")
	}
	caps := e.Capabilities()
	rel, err := filepath.Rel(caps.CgroupMount, caps.CgroupParent)
	if err != nil {
		t.Fatal(err)
	}
	env, _, err := e.Create(ctx, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	group := filepath.Join("/sys/fs/cgroup/memory", rel, env.ID)
	if _, err := os.Stat(group); err != nil {
		t.Errorf("the environment's v1 memory group: %v; want it under the mirrored parent %s", err, rel)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", planner.V1LimitParent, env.ID)); err == nil {
		t.Errorf("the environment's v1 memory group is under the shared %q", planner.V1LimitParent)
	}
	if _, err := e.StopEnv(ctx, env.ID, StopOptions{Grace: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(group); !os.IsNotExist(err) {
		t.Errorf("after the stop, %s: %v; want it removed", group, err)
	}
	if err := testutil.RemoveV1Mirrors(caps.CgroupParent); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", rel)); !os.IsNotExist(err) {
		t.Errorf("after RemoveV1Mirrors, the mirrored parent: %v; want it removed", err)
	}
}
