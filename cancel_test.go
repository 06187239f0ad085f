package hostfork_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/spec"
)

// daemonTree is a command whose leader starts a setsid'd grandchild that
// ignores SIGTERM (so only the kill after the grace ends it), writes both
// PIDs, and waits.
func daemonTree(dir string) []string {
	d, l := filepath.Join(dir, "daemon.pid"), filepath.Join(dir, "leader.pid")
	return []string{"sh", "-c", `setsid sh -c 'trap "" TERM; echo $$ > ` + d + `.tmp; mv ` + d + `.tmp ` + d + `; while :; do sleep 0.05; done' &
echo $$ > ` + l + `.tmp; mv ` + l + `.tmp ` + l + `; wait`}
}

// treeIdentities waits for daemonTree's PID files and returns the leader's
// and the daemon's identities (PID and start time), checking that the
// daemon left the leader's session.
func treeIdentities(t *testing.T, dir string) (leader, daemon linux.Identity) {
	t.Helper()
	leader = waitPIDFile(t, filepath.Join(dir, "leader.pid"))
	daemon = waitPIDFile(t, filepath.Join(dir, "daemon.pid"))
	if sid, err := unix.Getsid(daemon.PID); err != nil || sid != daemon.PID {
		t.Fatalf("the daemon %d is not a session leader: sid %d %v", daemon.PID, sid, err)
	}
	return leader, daemon
}

// wantStoppedBy checks a final record of a tree hostfork stopped for
// reason, and that both recorded processes are gone by identity.
func wantStoppedBy(t *testing.T, rec hostfork.CommandRecord, reason hostfork.StopReason, leader, daemon linux.Identity) {
	t.Helper()
	if !rec.Final() || rec.TreeState != hostfork.PhaseExited || rec.StopReason != reason || !rec.StoppedByHostfork || rec.Signal == nil {
		t.Errorf("record: state %s tree %s reason %q (want %q) by hostfork %v signal %v exit %v",
			rec.State, rec.TreeState, rec.StopReason, reason, rec.StoppedByHostfork, rec.Signal, rec.ExitCode)
	}
	if !rec.StopReason.EndedByHostfork() {
		t.Errorf("reason %q: not ended by hostfork (the CLI would not exit 124)", rec.StopReason)
	}
	if rec.Workload == nil || rec.Workload.PID != leader.PID || rec.Workload.StartTime != leader.StartTime {
		t.Errorf("the recorded workload %+v is not the leader %v", rec.Workload, leader)
	}
	wantGone(t, "the leader", leader)
	wantGone(t, "the setsid'd daemon", daemon)
}

// Cancelling the context a command was started with stops its whole tree,
// as exec.CommandContext kills its process: SIGTERM, WaitDelay, SIGKILL
// (for the daemon that ignores SIGTERM); the record says "cancelled".
func TestContextCancelStopsTree(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{})
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := env.Command(daemonTree(dir)...)
	cmd.WaitDelay = 300 * time.Millisecond
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	leader, daemon := treeIdentities(t, dir)
	cancel()
	wctx := ctxT(t)
	rec, err := cmd.WaitTree(wctx)
	if err != nil {
		t.Fatal(err)
	}
	wantStoppedBy(t, rec, hostfork.ReasonCancelled, leader, daemon)
	if _, read, err := h.Status(wctx, cmd.ID()); err != nil || read.StopReason != hostfork.ReasonCancelled || !read.Final() {
		t.Errorf("the stored record: %v %+v", err, read)
	}
	// The environment is not stopped by a command's cancellation.
	if e, err := env.Refresh(wctx); err != nil || e.State != hostfork.EnvActive {
		t.Errorf("the environment after its command's cancellation: %v %s", err, e.State)
	}
}

// A context that ends after the tree has exited changes nothing; one that
// is never done leaves the tree to its own bounds.
func TestContextDoneAfterExit(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{})
	ctx, cancel := context.WithCancel(context.Background())
	cmd := env.Command("true")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wctx := ctxT(t)
	if _, err := cmd.WaitTree(wctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(50 * time.Millisecond) // a stop, if one were wrongly made, would be recorded by now
	_, rec, err := h.Status(wctx, cmd.ID())
	if err != nil || rec.StopReason != "" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("after a late cancellation: %v %+v", err, rec)
	}
}

// A context already done at Start starts nothing (or stops it at once):
// either way no process outlives the call's result and the record says so.
func TestContextDoneBeforeStart(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cmd := env.Command("sleep", "300")
	err := cmd.Start(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Start with a done context: %v, want context.Canceled", err)
		}
		cmds, lerr := h.Commands(ctxT(t), hostfork.CommandFilter{Env: env.ID(), Live: true})
		if lerr != nil || len(cmds) != 0 {
			t.Fatalf("live commands after a refused start: %v %+v", lerr, cmds)
		}
		t.Logf("Start refused: %v", err)
		return
	}
	rec, err := cmd.WaitTree(ctxT(t))
	if err != nil || rec.StopReason != hostfork.ReasonCancelled {
		t.Fatalf("a command started with a done context: %v %+v", err, rec)
	}
	t.Logf("started, then stopped: %s", rec.StopReason)
}

// Command.Timeout stops the whole tree this long after it started (the
// environment's grace, then SIGKILL); the record says "timeout" and its
// deadline is the timeout's.
func TestCommandTimeoutStopsTree(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{Grace: spec.Duration(300 * time.Millisecond)}})
	dir := t.TempDir()
	cmd := env.Command(daemonTree(dir)...)
	cmd.Timeout = time.Second
	ctx := ctxT(t)
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	leader, daemon := treeIdentities(t, dir)
	_, live, err := h.Status(ctx, cmd.ID())
	if err != nil {
		t.Fatal(err)
	}
	if live.Timeout.D() != time.Second || live.DeadlineAt == nil || live.StartedAt == nil || !live.DeadlineAt.Equal(live.StartedAt.Add(time.Second)) {
		t.Errorf("the live record: timeout %v, deadline %v, started %v", live.Timeout, live.DeadlineAt, live.StartedAt)
	}
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantStoppedBy(t, rec, hostfork.ReasonTimeout, leader, daemon)
	if rec.LeaderExitedAt == nil || rec.StartedAt == nil || rec.LeaderExitedAt.Sub(*rec.StartedAt) < time.Second {
		t.Errorf("stopped before its timeout: started %v, leader exited %v", rec.StartedAt, rec.LeaderExitedAt)
	}
	// The timeout ended the command, not the environment.
	if e, err := env.Refresh(ctx); err != nil || e.State != hostfork.EnvActive {
		t.Errorf("the environment after its command's timeout: %v %s", err, e.State)
	}
}

// A command's timeout never extends the environment's deadline: with a
// longer timeout, the deadline stops the tree (reason "deadline").
func TestCommandTimeoutDoesNotExtendDeadline(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{
		MaxRuntime: spec.Duration(2 * time.Second), Grace: spec.Duration(300 * time.Millisecond)}})
	dir := t.TempDir()
	cmd := env.Command(daemonTree(dir)...)
	cmd.Timeout = time.Hour
	ctx := ctxT(t)
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	leader, daemon := treeIdentities(t, dir)
	_, live, err := h.Status(ctx, cmd.ID())
	if err != nil {
		t.Fatal(err)
	}
	er := env.Record()
	if live.DeadlineAt == nil || er.DeadlineAt == nil || !live.DeadlineAt.Equal(*er.DeadlineAt) {
		t.Errorf("the command's deadline %v, the environment's %v", live.DeadlineAt, er.DeadlineAt)
	}
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantStoppedBy(t, rec, hostfork.ReasonDeadline, leader, daemon)
}

// A one-shot Run with a cancelled context stops its tree ("cancelled") and
// then, as every run, its environment.
func TestRunContextCancel(t *testing.T) {
	h := newHost(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := h.Plan(ctx, spec.Environment{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(daemonTree(dir)...)
	cmd.WaitDelay = 300 * time.Millisecond
	env, err := h.Run(ctx, p, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop(context.Background(), hostfork.StopOptions{Grace: -1}) })
	leader, daemon := treeIdentities(t, dir)
	cancel()
	rec, err := cmd.WaitTree(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	wantStoppedBy(t, rec, hostfork.ReasonCancelled, leader, daemon)
	waitEnvState(t, h, env.ID(), hostfork.EnvStopped)
}

// The records Wait and Capture return for a tree the deadline ended are
// the leader's final result: its signal and the stop reason (issue 9: a
// deadline-killed command came back running, without a reason).
func TestDeadlineKilledRecords(t *testing.T) {
	h := newHost(t)
	env := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{
		MaxRuntime: spec.Duration(time.Second), Grace: spec.Duration(200 * time.Millisecond)}})
	ctx := ctxT(t)
	capt := env.Command("sh", "-c", "echo started; exec sleep 300")
	waited := env.Command("sleep", "300")
	if err := waited.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := capt.Capture(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := waited.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]hostfork.CommandRecord{"Capture": res.Record, "Wait": w} {
		if r.LeaderState != hostfork.PhaseExited || r.Signal == nil || r.StopReason != hostfork.ReasonDeadline || !r.StoppedByHostfork {
			t.Errorf("%s's record: state %s leader %s signal %v reason %q by hostfork %v",
				name, r.State, r.LeaderState, r.Signal, r.StopReason, r.StoppedByHostfork)
		}
	}
	if text, err := res.Text(); err != nil || text != "started\n" {
		t.Errorf("captured %q %v", text, err)
	}
	for _, c := range []*hostfork.Command{capt, waited} {
		r, err := c.WaitTree(ctx)
		if err != nil || !r.Final() || r.StopReason != hostfork.ReasonDeadline {
			t.Errorf("WaitTree: %v %+v", err, r)
		}
	}
}
