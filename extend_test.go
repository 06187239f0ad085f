package hostfork_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// extension is what a child extender does: open the store, move env's
// deadline to TTL from now, print "extended", then block until killed.
type extension struct {
	Root, CgroupParent, Env string
	TTL                     time.Duration
}

func extender() int {
	var o extension
	if err := json.Unmarshal([]byte(os.Getenv(childArgs)), &o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: o.Root, CgroupParent: o.CgroupParent})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err := h.OpenEnv(ctx, o.Env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := env.Extend(ctx, hostfork.ExtendOptions{TTL: api.Duration(o.TTL)}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("extended now")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// A deadline moved later holds after the caller that moved it is
// SIGKILLed the moment Extend returned: the guardian and the keeper (an
// environment with a view) both took it, so neither stops anything at the
// old deadline, and both stop at the new one (reason "deadline").
func TestExtendHoldsAfterCallerKilled(t *testing.T) {
	parent := testutil.CgroupParent(t)
	h, err := hostfork.Open(context.Background(), hostfork.Options{Root: t.TempDir(), CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctx := ctxT(t)
	lower := ext4Dir(t)
	writeFiles(t, lower, map[string]string{"f.txt": "x\n"})
	const ttl, grace = 2 * time.Second, 300 * time.Millisecond
	env := createEnv(t, h, spec.Environment{
		Trees:    map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View:     spec.View{Replace: map[string]string{t.TempDir(): "proj"}},
		Lifetime: spec.Lifetime{MaxRuntime: spec.Duration(ttl), Grace: spec.Duration(grace)},
	})
	old := env.Record()
	if old.Keeper == nil {
		t.Fatal("an environment with a view has no keeper")
	}
	keeper := linux.Identity{BootID: old.Keeper.BootID, PID: old.Keeper.PID, StartTime: old.Keeper.StartTime}
	cmd := env.Command("sleep", "300")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, "extender", extension{Root: h.Root(), CgroupParent: parent, Env: env.ID(), TTL: 6 * time.Second})
	movedAt := time.Now()
	c.next(t, "extended")
	c.kill()
	// Past the old deadline (and its grace) by a margin: both still run.
	time.Sleep(time.Until(old.DeadlineAt.Add(time.Second)))
	if l := linux.Assess(keeper); l != linux.Alive {
		t.Fatalf("the keeper is %v after the old deadline", l)
	}
	if _, live, err := h.Status(ctx, cmd.ID()); err != nil || live.Final() {
		t.Fatalf("the command after the old deadline: %v %+v", err, live)
	}
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.StopReason != hostfork.ReasonDeadline {
		t.Errorf("stop reason %q, want deadline", rec.StopReason)
	}
	// The new deadline is at least 6 s after the move began; its stop
	// begins a grace earlier.
	if rec.LeaderExitedAt == nil || rec.LeaderExitedAt.Before(movedAt.Add(6*time.Second-grace)) {
		t.Errorf("the tree was stopped at %v, before the new deadline's stop (%v)", rec.LeaderExitedAt, movedAt.Add(6*time.Second-grace))
	}
	e := waitEnvState(t, h, env.ID(), hostfork.EnvStopped)
	if e.StopReason != hostfork.ReasonDeadline || len(e.DeadlineMoves) != 1 || !e.DeadlineMoves[0].From.Equal(*old.DeadlineAt) || !e.DeadlineMoves[0].To.Equal(*e.DeadlineAt) {
		t.Errorf("the environment's record: reason %q moves %+v deadline %v", e.StopReason, e.DeadlineMoves, e.DeadlineAt)
	}
	for i := 0; linux.Assess(keeper) == linux.Alive; i++ {
		if i > 500 {
			t.Fatal("the keeper outlived the environment's stop by 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A deadline moved earlier stops the tree at the new time, reason
// "deadline", and the move is in the record and the event log.
func TestExtendEarlier(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{MaxRuntime: spec.Duration(time.Hour), Grace: spec.Duration(200 * time.Millisecond)}})
	cmd := env.Command("sleep", "300")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	before := env.Record()
	at := time.Now().Add(1500 * time.Millisecond)
	rec, err := env.Extend(ctx, hostfork.ExtendOptions{Until: &at})
	if err != nil {
		t.Fatal(err)
	}
	if rec.DeadlineAt == nil || !rec.DeadlineAt.Equal(at) || len(rec.DeadlineMoves) != 1 || !rec.DeadlineMoves[0].From.Equal(*before.DeadlineAt) {
		t.Fatalf("the record after Extend: deadline %v moves %+v", rec.DeadlineAt, rec.DeadlineMoves)
	}
	r, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.StopReason != hostfork.ReasonDeadline || r.LeaderExitedAt == nil || r.LeaderExitedAt.Before(at.Add(-200*time.Millisecond)) || r.LeaderExitedAt.After(at.Add(30*time.Second)) {
		t.Errorf("the tree: reason %q stopped at %v, want deadline at %v", r.StopReason, r.LeaderExitedAt, at)
	}
	var moved []hostfork.Event
	for ev, err := range h.Events(ctx, 0, false) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Env == env.ID() && ev.Kind == api.EventEnvDeadlineMoved {
			moved = append(moved, ev)
		}
	}
	want := "from " + before.DeadlineAt.UTC().Format(time.RFC3339Nano) + " to " + at.UTC().Format(time.RFC3339Nano)
	if len(moved) != 1 || moved[0].Detail != want {
		t.Errorf("deadline_moved events %+v, want one with %q", moved, want)
	}
}

// Bad moves are refused with the fix in the message, and change nothing:
// past the store's lifetime.max, into the past, both forms, of an
// environment without a deadline.
func TestExtendRefused(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	if err := os.WriteFile(filepath.Join(h.Root(), "config.yaml"), []byte("lifetime:\n  max: 10m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{MaxRuntime: spec.Duration(time.Minute)}})
	before := env.Record()
	past := time.Now().Add(-time.Minute)
	for _, c := range []struct {
		name string
		o    hostfork.ExtendOptions
		want string
	}{
		{"beyond max", hostfork.ExtendOptions{TTL: api.Duration(time.Hour)}, "maximum lifetime of 10m0s"},
		{"in the past", hostfork.ExtendOptions{Until: &past}, "not in the future"},
		{"both", hostfork.ExtendOptions{TTL: api.Duration(time.Minute), Until: &past}, "not both"},
		{"neither", hostfork.ExtendOptions{}, "give the new deadline"},
	} {
		_, err := env.Extend(ctx, c.o)
		if !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", c.name, err, c.want)
		}
	}
	after, err := env.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !after.DeadlineAt.Equal(*before.DeadlineAt) || len(after.DeadlineMoves) != 0 {
		t.Errorf("a refused move changed the record: %v %+v", after.DeadlineAt, after.DeadlineMoves)
	}
	if _, err := os.Stat(filepath.Join(after.RunDir, "deadline")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused move wrote the deadline file: %v", err)
	}
	// Within the maximum: allowed.
	if _, err := env.Extend(ctx, hostfork.ExtendOptions{TTL: api.Duration(5 * time.Minute)}); err != nil {
		t.Errorf("a move within the maximum: %v", err)
	}
	forever := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{UntilStopped: true}})
	if _, err := forever.Extend(ctx, hostfork.ExtendOptions{TTL: api.Duration(time.Minute)}); !errors.Is(err, hostfork.ErrInvalid) || !strings.Contains(err.Error(), "no deadline") {
		t.Errorf("extend of an environment without a deadline: %v", err)
	}
}

// BenchmarkExtend measures Env.Extend in the library (target ≤ 5 ms):
// record, deadline file, pokes to a guardian.
func BenchmarkExtend(b *testing.B) {
	h := newHost(b)
	ctx := context.Background()
	p, err := h.Plan(ctx, spec.Environment{Lifetime: spec.Lifetime{MaxRuntime: spec.Duration(time.Hour)}})
	if err != nil {
		b.Fatal(err)
	}
	env, err := h.Create(ctx, p)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop(context.Background(), hostfork.StopOptions{Grace: -1}) })
	if err := env.Command("sleep", "300").Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ttl := time.Hour - time.Duration(i%2)*time.Minute
		if _, err := env.Extend(ctx, hostfork.ExtendOptions{TTL: api.Duration(ttl)}); err != nil {
			b.Fatal(err)
		}
	}
}
