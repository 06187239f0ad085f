package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
)

// TestForkClient: POST /v1/envs/{id}/fork through the Go client against a
// real server makes detached children holding the parent's files, and
// refuses a count outside 1..64 with ErrInvalid, making nothing.
func TestForkClient(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, 2*time.Minute)
	src, target := treeSource(t, e)
	env, err := c.CreateEnv(ctx, map[string]any{
		"lifetime": map[string]any{"max_runtime": "5m"},
		"trees":    map[string]any{"work": map[string]any{"kind": "copy", "source": src}},
		"view":     map[string]any{"replace": map[string]string{target: "work"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.StopEnv(context.Background(), env.ID, client.StopOptions{}) })
	cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sh", "-c", "echo parent > " + target + "/p.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, cmd.ID, client.WaitTree); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 65} {
		kids, err := c.Fork(ctx, env.ID, client.ForkRequest{Count: n})
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "64") || len(kids) != 0 {
			t.Fatalf("fork count %d: %v, %d children", n, err, len(kids))
		}
	}
	kids, err := c.Fork(ctx, env.ID, client.ForkRequest{Count: 2, Labels: map[string]string{"try": "x"}, TTL: api.Duration(time.Minute)})
	for _, k := range kids {
		t.Cleanup(func() { _, _ = c.StopEnv(context.Background(), k.ID, client.StopOptions{}) })
	}
	if err != nil || len(kids) != 2 {
		t.Fatalf("fork: %d children, %v", len(kids), err)
	}
	for _, k := range kids {
		if k.State != api.EnvActive || k.OwnerExit != api.OwnerExitDetach || k.Labels["try"] != "x" || k.Fork == nil || k.Fork.Parent != env.ID || !k.Fork.Frozen {
			t.Fatalf("child %s: state %s owner_exit %s labels %v fork %+v", k.ID, k.State, k.OwnerExit, k.Labels, k.Fork)
		}
		b, err := os.ReadFile(filepath.Join(k.Trees[0].HostPath, "p.txt"))
		if err != nil || string(b) != "parent\n" {
			t.Fatalf("child %s tree: %q, %v", k.ID, b, err)
		}
	}
	all, err := c.Envs(ctx, api.EnvFilter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("envs after the forks: %d, %v (want the parent and two children)", len(all), err)
	}
}
