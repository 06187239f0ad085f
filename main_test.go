package hostfork_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/childproc"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

func TestMain(m *testing.M) {
	// This test binary re-executes itself as the guardian.
	childproc.Dispatch()
	os.Exit(m.Run())
}

// newHost opens a store in a temporary directory with a unique test cgroup
// parent; both are removed when the test ends.
func newHost(t *testing.T) *hostfork.Host {
	t.Helper()
	parent := testutil.CgroupParent(t)
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: t.TempDir(), CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

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

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
