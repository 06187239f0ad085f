package hostfork_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// TestMain runs the tests and examples. The guardian and the keeper need
// no dispatch here: this test binary links package hostfork, so the C
// constructor of internal/supervise runs them before the Go runtime starts
// (as it does in any program that imports hostfork). The test binary's own
// child modes (a workload helper, an orchestrator that gets SIGKILLed) are
// dispatched in init (helpers_child_test.go), before TestMain.
//
// The examples open stores the way a user's program would, with the
// default cgroup parent: $HOSTFORK_CGROUP_PARENT, which TestMain points at
// a unique group it removes (killing anything left) when the run ends.
func TestMain(m *testing.M) {
	cleanup := exampleCgroupParent()
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// exampleCgroupParent sets $HOSTFORK_CGROUP_PARENT to a fresh group under
// the cgroup2 mount (as root, when there is one) and returns its removal.
func exampleCgroupParent() func() {
	if os.Geteuid() != 0 || os.Getenv("HOSTFORK_CGROUP_PARENT") != "" {
		return func() {}
	}
	mnt, err := cgroup.FindMount()
	if err != nil {
		return func() {}
	}
	p := filepath.Join(mnt.Path, testutil.UniqueName("hostfork-example"))
	if _, err := cgroup.Create(p); err != nil {
		fmt.Fprintf(os.Stderr, "TestMain: creating the examples' cgroup parent: %v\n", err)
		return func() {}
	}
	os.Setenv("HOSTFORK_CGROUP_PARENT", p)
	return func() {
		os.Unsetenv("HOSTFORK_CGROUP_PARENT")
		g := cgroup.Open(p)
		_ = g.Kill()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.WaitEmpty(ctx)
		if err := g.Remove(); err != nil && !os.IsNotExist(err) {
			fmt.Fprintf(os.Stderr, "TestMain: removing %s: %v\n", p, err)
		}
		if err := testutil.RemoveV1Mirrors(p); err != nil {
			fmt.Fprintf(os.Stderr, "TestMain: %v\n", err)
		}
	}
}

// newHost opens a store in a temporary directory with a unique test cgroup
// parent; both are removed when the test ends.
func newHost(t testing.TB) *hostfork.Host {
	t.Helper()
	parent := testutil.CgroupParent(t)
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: t.TempDir(), CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// newEnv creates an environment that is stopped (at once) at cleanup.
func newEnv(t *testing.T, h *hostfork.Host, s spec.Environment) *hostfork.Env {
	t.Helper()
	ctx := context.Background()
	p, err := h.Plan(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	env, err := h.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop(context.Background(), hostfork.StopOptions{Grace: -1}) })
	return env
}

// ctxT is a context that ends with the test, bounded as a safety net.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}
