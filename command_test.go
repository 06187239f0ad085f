package hostfork_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// waitPIDFile waits until path holds a PID (written by a workload) and
// returns that process's identity.
func waitPIDFile(t *testing.T, path string) linux.Identity {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		b, _ := os.ReadFile(path)
		if s := strings.TrimSpace(string(b)); s != "" && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: %q", path, b)
			}
			id, err := linux.IdentityOf(pid)
			if err != nil {
				t.Fatalf("process %d of %s: %v", pid, path, err)
			}
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing wrote its pid to %s", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantGone checks, by identity (PID and start time), that a process is gone.
func wantGone(t *testing.T, what string, id linux.Identity) {
	t.Helper()
	if l := linux.Assess(id); l != linux.Gone {
		t.Errorf("%s %v is %v, want it gone", what, id, l)
	}
}

// A daemon that double-forks and calls setsid is owned: stopping the
// environment ends it and the record shows the tree exited.
func TestSetsidDaemonIsOwned(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	pidfile := t.TempDir() + "/daemon.pid"
	cmd := env.Command("sh", "-c", "setsid sh -c 'echo $$ > "+pidfile+"; exec sleep 300' & exit 0")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := cmd.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.LeaderState != hostfork.PhaseExited || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("leader: %+v", res)
	}
	id := waitPIDFile(t, pidfile)
	if r := cmd.Record(); r.TreeState != hostfork.PhaseLive {
		t.Errorf("while the daemon runs: tree %s", r.TreeState)
	}
	if _, r, err := h.Status(ctx, cmd.ID()); err != nil || r.TreeState != hostfork.PhaseLive || r.Liveness != hostfork.Alive || !r.Stoppable {
		t.Fatalf("status while the daemon runs: %v, tree %s, liveness %s, stoppable %v", err, r.TreeState, r.Liveness, r.Stoppable)
	}
	live, err := h.Commands(ctx, hostfork.CommandFilter{Live: true})
	if err != nil || len(live) != 1 || live[0].ID != cmd.ID() {
		t.Fatalf("live commands while the daemon runs: %v %+v", err, live)
	}
	if err := env.Stop(ctx, hostfork.StopOptions{Reason: hostfork.ReasonUser}); err != nil {
		t.Fatal(err)
	}
	tree, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tree.TreeState != hostfork.PhaseExited || tree.StopReason != hostfork.ReasonUser || tree.State != hostfork.CommandExited {
		t.Fatalf("tree: %+v", tree)
	}
	wantGone(t, "the daemon", id)
	rows, err := h.Commands(ctx, hostfork.CommandFilter{Live: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Fatalf("still listed as live: %+v", rows)
	}
}

// Leader exit and tree exit are separate, recorded events.
func TestLeaderExitBeforeTreeExit(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("sh", "-c", "sleep 1 & exit 3")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := cmd.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == nil || *res.ExitCode != 3 || res.TreeState == hostfork.PhaseExited || res.LeaderState != hostfork.PhaseExited {
		t.Fatalf("at leader exit: exit %v leader %s tree %s", res.ExitCode, res.LeaderState, res.TreeState)
	}
	tree, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tree.TreeState != hostfork.PhaseExited || tree.TreeExitedAt == nil || tree.LeaderExitedAt == nil || !tree.TreeExitedAt.After(*tree.LeaderExitedAt) {
		t.Fatalf("tree: %+v", tree)
	}
	if tree.StopReason != "" || tree.StoppedByHostfork {
		t.Fatalf("nobody stopped it, yet stop reason %q (by hostfork %v)", tree.StopReason, tree.StoppedByHostfork)
	}
	if st, ok := hostfork.ExitStatus(tree); !ok || st != 3 {
		t.Fatalf("exit status %d %v", st, ok)
	}
}

// TreeSeen says the guardian's word that the tree is gone, before the
// result's commit: open while a process the leader left runs, closed once
// it has ended; nil before Start.
func TestTreeSeen(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	done := filepath.Join(t.TempDir(), "done")
	cmd := env.Command("sh", "-c", "sh -c 'while [ ! -e "+done+" ]; do sleep 0.01; done' & exit 0")
	if cmd.TreeSeen() != nil {
		t.Fatal("TreeSeen before Start is not nil")
	}
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The leader's child waits for the file: the tree lives.
	select {
	case <-cmd.TreeSeen():
		t.Fatal("TreeSeen is closed while a process of the tree waits for a file")
	default:
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cmd.TreeSeen():
	case <-ctx.Done():
		t.Fatal("TreeSeen not closed after the tree's last process ended")
	}
	tree, err := cmd.WaitTree(ctx)
	if err != nil || !tree.Final() || tree.TreeState != hostfork.PhaseExited || tree.StopReason != "" {
		t.Fatalf("WaitTree: %v %+v", err, tree)
	}
}

// An exec that fails in the guardian (a script whose interpreter is
// missing) is a tree that is gone: TreeSeen is closed by the time the
// leader's wait returns, so run stops no leftovers for it.
func TestTreeSeenExecFailed(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := env.Command(bad)
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cmd.TreeSeen():
	default:
		t.Fatal("TreeSeen is open after the leader's wait of a failed exec")
	}
	tree, err := cmd.WaitTree(ctx)
	if err != nil || tree.ExitCode == nil || *tree.ExitCode != 127 || tree.StopReason != "" {
		t.Fatalf("WaitTree of a failed exec: %v %+v", err, tree)
	}
}

// The records a live handle returns (Record, Wait, WaitTree, StopTree)
// carry the computed fields, as the records a reader gets (Status,
// Commands) do: ps's "is it alive", "can it be stopped", the PID.
func TestHandleRecordsAreComputed(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{Lifetime: spec.Lifetime{MaxRuntime: spec.Duration(time.Hour)}})
	cmd := env.Command("sleep", "300")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitWorkload(t, cmd)
	_, read, err := h.Status(ctx, cmd.ID())
	if err != nil {
		t.Fatal(err)
	}
	if read.Liveness != hostfork.Alive || !read.Stoppable || read.PID == nil || read.DeadlineAt == nil {
		t.Fatalf("the reader's record: liveness %q stoppable %v pid %v deadline %v", read.Liveness, read.Stoppable, read.PID, read.DeadlineAt)
	}
	if r := cmd.Record(); r.Liveness != read.Liveness || r.Stoppable != read.Stoppable || r.PID == nil || *r.PID != *read.PID || r.DeadlineAt == nil {
		t.Errorf("Record() of the live handle: liveness %q stoppable %v pid %v deadline %v; the reader's: %q %v %v %v",
			r.Liveness, r.Stoppable, r.PID, r.DeadlineAt, read.Liveness, read.Stoppable, *read.PID, read.DeadlineAt)
	}
	stopped, err := cmd.StopTree(ctx, hostfork.StopOptions{Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cmd.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]hostfork.CommandRecord{"StopTree": stopped, "Wait": w, "WaitTree": wt} {
		if r.Liveness != hostfork.Exited || r.Stoppable || r.PID != nil {
			t.Errorf("%s's record: liveness %q stoppable %v pid %v, want exited, false, nil", name, r.Liveness, r.Stoppable, r.PID)
		}
	}
}

// A Command handle is usable before Start: its record is the zero record,
// and waiting or signalling says it was not started.
func TestCommandBeforeStart(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("true")
	if r := cmd.Record(); r.ID != "" || cmd.ID() != "" {
		t.Fatalf("record before start: %+v", r)
	}
	if _, err := cmd.Wait(ctx); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("Wait before Start: %v", err)
	}
	if _, err := cmd.WaitTree(ctx); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("WaitTree before Start: %v", err)
	}
	if _, err := cmd.StopTree(ctx, hostfork.StopOptions{}); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("StopTree before Start: %v", err)
	}
	if _, err := cmd.Logs(ctx, hostfork.LogOptions{}); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("Logs before Start: %v", err)
	}
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(ctx); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("a second Start: %v", err)
	}
	if _, err := cmd.WaitTree(ctx); err != nil {
		t.Fatal(err)
	}
	var zero hostfork.Command
	if _, err := zero.Wait(ctx); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("Wait on a zero Command: %v", err)
	}
	if err := zero.Start(ctx); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("Start of a zero Command: %v", err)
	}
}

// Wait returns once the leader's result is final: for a tree hostfork
// stopped, the signal and the stop reason are already in the record, and
// WaitTree's record is final.
func TestWaitRecordIsFinal(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	cmd := env.Command("sleep", "300")
	if err := cmd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan hostfork.CommandRecord, 1)
	go func() {
		r, err := cmd.Wait(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitWorkload(t, cmd)
	stopped, err := cmd.StopTree(ctx, hostfork.StopOptions{Reason: hostfork.ReasonUser})
	if err != nil {
		t.Fatal(err)
	}
	if !stopped.Final() || stopped.StopReason != hostfork.ReasonUser || stopped.TreeState != hostfork.PhaseExited {
		t.Fatalf("StopTree's record: %+v", stopped)
	}
	r := <-done
	if r.LeaderState != hostfork.PhaseExited || r.Signal == nil || *r.Signal != 15 || r.StopReason != hostfork.ReasonUser || !r.StoppedByHostfork {
		t.Fatalf("Wait's record: leader %s signal %v reason %q by hostfork %v", r.LeaderState, r.Signal, r.StopReason, r.StoppedByHostfork)
	}
	if st, ok := hostfork.ExitStatus(r); !ok || st != 128+15 {
		t.Fatalf("exit status %d %v", st, ok)
	}
	tree, err := cmd.WaitTree(ctx)
	if err != nil || !tree.Final() || tree.State != hostfork.CommandExited || tree.StopReason != hostfork.ReasonUser {
		t.Fatalf("WaitTree: %v %+v", err, tree)
	}
	if !tree.StopReason.EndedByHostfork() {
		t.Fatalf("a user stop is ended by hostfork (the CLI exits 124)")
	}
}

// Host.Run creates the environment with its first command and stops the
// environment once that command's tree has exited.
func TestRunStopsTheEnvironment(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	lower := ext4Dir(t)
	writeFiles(t, lower, map[string]string{"f.txt": "lower\n"})
	target := t.TempDir()
	p, err := h.Plan(ctx, spec.Environment{
		Purpose: "one-shot",
		Trees:   map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View:    spec.View{Replace: map[string]string{target: "proj"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command("sh", "-c", "cat f.txt; echo out > g.txt; exit 5")
	cmd.Cwd = target
	env, err := h.Run(ctx, p, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Stop(context.Background(), hostfork.StopOptions{Grace: -1})
		removeTrees(t, h, env.ID())
	})
	if _, err := h.Run(ctx, p, cmd); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("Run of a started command: %v", err)
	}
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := hostfork.ExitStatus(rec); !ok || st != 5 || rec.Env != env.ID() {
		t.Fatalf("record: %+v", rec)
	}
	if b, _ := os.ReadFile(rec.StdoutPath); string(b) != "lower\n" {
		t.Fatalf("stdout %q", b)
	}
	er := waitEnvState(t, h, env.ID(), hostfork.EnvStopped)
	if !er.AutoStop || er.StopReason == "" || er.StopReason.EndedByHostfork() {
		t.Fatalf("the run's environment: auto-stop %v, reason %q", er.AutoStop, er.StopReason)
	}
	wantFile(t, filepath.Join(er.Trees[0].HostPath, "g.txt"), "out\n")
	if err := env.Command("true").Start(ctx); !errors.Is(err, hostfork.ErrEnvNotActive) {
		t.Fatalf("a command in a run's stopped environment: %v", err)
	}
}

// waitEnvState reads the environment's record until it is in state want.
func waitEnvState(t *testing.T, h *hostfork.Host, id string, want hostfork.EnvState) hostfork.EnvRecord {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		e, _, err := h.Status(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if e.State == want {
			return *e
		}
		if time.Now().After(deadline) {
			t.Fatalf("environment %s is %s, want %s", id, e.State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// After Host.Close, pending and new waits return ErrClosed, never a
// record that is not final as if it were a result.
func TestWaitAfterClose(t *testing.T) {
	parent := testutil.CgroupParent(t)
	root := t.TempDir()
	ctx := ctxT(t)
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root, CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Plan(ctx, spec.Environment{})
	if err != nil {
		t.Fatal(err)
	}
	env, err := h.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The closed Host can't stop it: a second one does.
		h2, err := hostfork.Open(context.Background(), hostfork.Options{Root: root, CgroupParent: parent})
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer h2.Close()
		if _, err := h2.StopEnv(context.Background(), env.ID(), hostfork.StopOptions{Grace: -1}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	cmd := env.Command("sleep", "300")
	if err := cmd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { _, err := cmd.Wait(ctx); errs <- err }()
	go func() { _, err := cmd.WaitTree(ctx); errs <- err }()
	time.Sleep(50 * time.Millisecond) // let both waits block (not needed for correctness)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, hostfork.ErrClosed) {
			t.Errorf("a pending wait after Close: %v, want ErrClosed", err)
		}
	}
	if r, err := cmd.Wait(ctx); !errors.Is(err, hostfork.ErrClosed) {
		t.Errorf("Wait after Close: %v %+v", err, r)
	}
	if r, err := cmd.WaitTree(ctx); !errors.Is(err, hostfork.ErrClosed) {
		t.Errorf("WaitTree after Close: %v %+v", err, r)
	}
	if _, err := h.Commands(ctx, hostfork.CommandFilter{}); !errors.Is(err, hostfork.ErrClosed) {
		t.Errorf("Commands after Close: %v", err)
	}
	if err := env.Command("true").Start(ctx); !errors.Is(err, hostfork.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

// Environments and commands are listed by labels, state and environment;
// an environment without commands is found too.
func TestListByLabels(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	a := newEnv(t, h, spec.Environment{Labels: map[string]string{"team": "red", "goal": "g1"}})
	b := newEnv(t, h, spec.Environment{Labels: map[string]string{"team": "blue"}})
	c := newEnv(t, h, spec.Environment{Labels: map[string]string{"team": "red"}})
	ids := func(envs []hostfork.EnvRecord) []string {
		var out []string
		for _, e := range envs {
			out = append(out, e.ID)
		}
		return out
	}
	for _, tc := range []struct {
		sel  string
		want []string
	}{
		{"", []string{a.ID(), b.ID(), c.ID()}},
		{"team=red", []string{a.ID(), c.ID()}},
		{"team=red,goal=g1", []string{a.ID()}},
		{"goal", []string{a.ID()}},
		{"team=green", nil},
	} {
		sel, err := hostfork.ParseSelector(tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		envs, err := h.Envs(ctx, hostfork.EnvFilter{Labels: sel})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(envs); !slices.Equal(got, tc.want) {
			t.Errorf("envs %q: %v, want %v", tc.sel, got, tc.want)
		}
	}
	if _, err := hostfork.ParseSelector("=x"); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("a selector without a key: %v", err)
	}

	run := func(env *hostfork.Env, labels map[string]string, argv ...string) *hostfork.Command {
		cmd := env.Command(argv...)
		cmd.Labels = labels
		if err := cmd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	done := run(a, map[string]string{"step": "build"}, "true")
	if _, err := done.WaitTree(ctx); err != nil {
		t.Fatal(err)
	}
	sleeping := run(a, map[string]string{"step": "test"}, "sleep", "300")
	other := run(b, map[string]string{"step": "test"}, "true")
	if _, err := other.WaitTree(ctx); err != nil {
		t.Fatal(err)
	}
	waitWorkload(t, sleeping)
	cids := func(f hostfork.CommandFilter) []string {
		t.Helper()
		cmds, err := h.Commands(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cmds {
			out = append(out, c.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    hostfork.CommandFilter
		want []string
	}{
		{"all", hostfork.CommandFilter{}, []string{done.ID(), sleeping.ID(), other.ID()}},
		{"env a", hostfork.CommandFilter{Env: a.ID()}, []string{done.ID(), sleeping.ID()}},
		{"step=test", hostfork.CommandFilter{Labels: hostfork.Selector{"step=test"}}, []string{sleeping.ID(), other.ID()}},
		{"live", hostfork.CommandFilter{Live: true}, []string{sleeping.ID()}},
		{"exited", hostfork.CommandFilter{States: []hostfork.CommandState{hostfork.CommandExited}}, []string{done.ID(), other.ID()}},
		{"env c", hostfork.CommandFilter{Env: c.ID()}, nil},
	} {
		if got := cids(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("commands %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	if err := b.Stop(ctx, hostfork.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	active, err := h.Envs(ctx, hostfork.EnvFilter{Active: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(active); !slices.Equal(got, []string{a.ID(), c.ID()}) {
		t.Errorf("active envs: %v", got)
	}
	stopped, err := h.Envs(ctx, hostfork.EnvFilter{States: []hostfork.EnvState{hostfork.EnvStopped}, WithCommands: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped) != 1 || stopped[0].ID != b.ID() || len(stopped[0].Commands) != 1 || stopped[0].Commands[0].ID != other.ID() {
		t.Errorf("stopped envs with commands: %+v", stopped)
	}
}

// A brief listing (CommandFilter.Brief, what 'hostfork ps' prints from)
// has, for every command, exactly the fields it promises as the whole
// listing has them — final commands of every kind of ending, and live ones
// (read whole) — and zero for the rest of a final command's fields.
func TestCommandsBrief(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{Labels: map[string]string{"team": "red"}})
	start := func(labels map[string]string, timeout time.Duration, argv ...string) *hostfork.Command {
		t.Helper()
		cmd := env.Command(argv...)
		cmd.Labels, cmd.Purpose, cmd.Timeout = labels, "brief "+argv[0], timeout
		if err := cmd.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	waitTree := func(c *hostfork.Command) {
		t.Helper()
		if _, err := c.WaitTree(ctx); err != nil {
			t.Fatalf("%s: %v", c.ID(), err)
		}
	}
	for _, c := range []*hostfork.Command{
		start(map[string]string{"step": "ok"}, 0, "true"),
		start(nil, 0, "sh", "-c", "exit 3"),
		start(nil, 0, "sh", "-c", "kill -TERM $$"),
		start(map[string]string{"step": "slow"}, 200*time.Millisecond, "sleep", "30"),
	} {
		waitTree(c)
	}
	notFound := env.Command("/nonexistent/program")
	if err := notFound.Start(ctx); err == nil {
		waitTree(notFound)
	}
	live := start(map[string]string{"step": "live"}, 0, "sleep", "300")
	waitWorkload(t, live)

	full, err := h.Commands(ctx, hostfork.CommandFilter{})
	if err != nil {
		t.Fatal(err)
	}
	brief, err := h.Commands(ctx, hostfork.CommandFilter{Brief: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(full) < 5 || len(brief) != len(full) {
		t.Fatalf("%d commands in the whole listing, %d in the brief one", len(full), len(brief))
	}
	promised := func(c hostfork.CommandRecord) hostfork.CommandRecord {
		return hostfork.CommandRecord{ID: c.ID, Env: c.Env, Rev: c.Rev, State: c.State, CreatedAt: c.CreatedAt, Purpose: c.Purpose,
			Labels: c.Labels, Argv: c.Argv, StdoutPath: c.StdoutPath, StderrPath: c.StderrPath, ExitCode: c.ExitCode, Signal: c.Signal,
			StopReason: c.StopReason, StoppedByHostfork: c.StoppedByHostfork, Error: c.Error, Liveness: c.Liveness, Stoppable: c.Stoppable, PID: c.PID, Dir: c.Dir}
	}
	kinds := map[string]bool{}
	for i := range full {
		f, b := full[i], brief[i]
		if !reflect.DeepEqual(promised(f), promised(b)) {
			t.Errorf("command %s: brief\n%+v\nwhole\n%+v", f.ID, promised(b), promised(f))
		}
		if f.Final() {
			// Everything else is zero, but the slices and maps readers
			// always fill.
			rest := b
			rest.ID, rest.Env, rest.Rev, rest.State, rest.CreatedAt, rest.Purpose = "", "", 0, "", time.Time{}, ""
			rest.Labels, rest.Argv, rest.StdoutPath, rest.StderrPath, rest.ExitCode, rest.Signal = nil, nil, "", "", nil, nil
			rest.StopReason, rest.StoppedByHostfork, rest.Error, rest.Liveness, rest.Stoppable, rest.PID = "", false, "", "", false, nil
			rest.Dir, rest.CleanupErrors, rest.EnvKeys, rest.Survivors, rest.Capture = "", nil, nil, nil, nil
			if !reflect.DeepEqual(rest, hostfork.CommandRecord{}) {
				t.Errorf("final command %s: a brief record has more than it promises: %+v", f.ID, rest)
			}
		} else if !reflect.DeepEqual(f.Workload, b.Workload) || b.Dir == "" {
			t.Errorf("live command %s was not read whole in the brief listing: %+v", f.ID, b)
		}
		switch {
		case !f.Final():
			kinds["live"] = true
		case f.StopReason != "":
			kinds["stopped"] = true
		case f.Signal != nil:
			kinds["signal"] = true
		case f.ExitCode != nil && *f.ExitCode != 0:
			kinds["exit code"] = true
		case f.ExitCode != nil:
			kinds["success"] = true
		}
	}
	for _, k := range []string{"live", "stopped", "signal", "exit code", "success"} {
		if !kinds[k] {
			t.Errorf("no %s command among %d: the test does not cover what it claims", k, len(full))
		}
	}
	// Filters apply as without Brief.
	lived, err := h.Commands(ctx, hostfork.CommandFilter{Brief: true, Live: true, Labels: hostfork.Selector{"step"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(lived) != 1 || lived[0].ID != live.ID() {
		t.Errorf("brief, live, step: %v", lived)
	}
}

// A reopened environment hands out handles on its commands: the live
// handle for a command this process started, a reopened one otherwise;
// both wait and stop.
func TestOpenEnvCommands(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	env := newEnv(t, h, spec.Environment{})
	first := env.Command("sh", "-c", "echo one")
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := first.WaitTree(ctx); err != nil {
		t.Fatal(err)
	}
	second := env.Command("sleep", "300")
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}

	again, err := h.OpenEnv(ctx, env.ID()[:6])
	if err != nil {
		t.Fatal(err)
	}
	if again.ID() != env.ID() || again.Record().State != hostfork.EnvActive {
		t.Fatalf("reopened: %s %+v", again.ID(), again.Record())
	}
	cmds, err := again.Commands(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 || cmds[0].ID() != first.ID() || cmds[1].ID() != second.ID() {
		t.Fatalf("commands: %d", len(cmds))
	}
	r, err := cmds[0].WaitTree(ctx)
	if err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("the finished command: %v %+v", err, r)
	}
	if got := cmds[0].Argv; !slices.Equal(got, []string{"sh", "-c", "echo one"}) {
		t.Errorf("reopened argv %q", got)
	}
	stopped, err := cmds[1].StopTree(ctx, hostfork.StopOptions{Grace: -1})
	if err != nil || stopped.TreeState != hostfork.PhaseExited || stopped.StopReason != hostfork.ReasonUser {
		t.Fatalf("stop through the reopened handle: %v %+v", err, stopped)
	}
	if r, err := second.WaitTree(ctx); err != nil || r.StopReason != hostfork.ReasonUser {
		t.Fatalf("the original handle: %v %+v", err, r)
	}

	if _, err := h.OpenEnv(ctx, first.ID()); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("OpenEnv of a command id: %v", err)
	}
	if _, err := h.OpenCommand(ctx, env.ID()); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("OpenCommand of an environment id: %v", err)
	}
	if _, err := h.OpenCommand(ctx, "zzzzzzzzzzzz"); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("OpenCommand of an unknown id: %v", err)
	}
	if _, _, err := h.Status(ctx, "zzzzzzzzzzzz"); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("Status of an unknown id: %v", err)
	}
	if _, err := h.StopEnv(ctx, first.ID(), hostfork.StopOptions{}); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("StopEnv of a command id: %v", err)
	}
	if _, err := h.StopCommand(ctx, env.ID(), hostfork.StopOptions{}); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("StopCommand of an environment id: %v", err)
	}
}

// Errors are told apart by errors.Is: an id prefix shared by two records
// is ambiguous; an existing export destination exists; a missing tree is
// not found.
func TestErrorSentinels(t *testing.T) {
	h := newHost(t)
	ctx := ctxT(t)
	lower := ext4Dir(t)
	writeFiles(t, lower, map[string]string{"f.txt": "x\n"})
	env := createEnv(t, h, spec.Environment{
		Trees: map[string]spec.Tree{"proj": {Kind: spec.KindOverlay, Source: lower}},
		View:  spec.View{Replace: map[string]string{t.TempDir(): "proj"}},
	})
	// Ids are random base32: among 33 environments two share a first
	// character.
	seen := map[byte]string{env.ID()[0]: env.ID()}
	var prefix string
	for prefix == "" {
		e := newEnv(t, h, spec.Environment{})
		if _, dup := seen[e.ID()[0]]; dup {
			prefix = e.ID()[:1]
		}
		seen[e.ID()[0]] = e.ID()
	}
	if _, _, err := h.Resolve(ctx, prefix); !errors.Is(err, hostfork.ErrAmbiguous) {
		t.Errorf("Resolve(%q): %v, want ErrAmbiguous", prefix, err)
	}
	if _, _, err := h.Status(ctx, prefix); !errors.Is(err, hostfork.ErrAmbiguous) {
		t.Errorf("Status(%q): %v, want ErrAmbiguous", prefix, err)
	}

	dest := t.TempDir()
	if _, err := env.Export(ctx, "proj", dest, hostfork.ExportOptions{}); !errors.Is(err, hostfork.ErrExists) {
		t.Errorf("export to an existing destination: %v, want ErrExists", err)
	}
	if _, err := env.Export(ctx, "nosuchtree", filepath.Join(t.TempDir(), "out"), hostfork.ExportOptions{}); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("export of a missing tree: %v, want ErrNotFound", err)
	}
	if _, err := h.Plan(ctx, spec.Environment{Trees: map[string]spec.Tree{"x": {Kind: "zfs"}}}); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("a plan with an unknown tree kind: %v, want ErrInvalid", err)
	}
	if _, err := h.AddBaseline(ctx, "b1", lower); err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddBaseline(ctx, "b1", lower); !errors.Is(err, hostfork.ErrExists) {
		t.Errorf("a second baseline of the same name: %v, want ErrExists", err)
	}
	if err := h.RemoveBaseline(ctx, "nosuch"); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("removing an unknown baseline: %v, want ErrNotFound", err)
	}
	cmd := env.Command("/nonexistent/program")
	if err := cmd.Start(ctx); !errors.Is(err, hostfork.ErrExecutableNotFound) {
		t.Errorf("starting a missing program: %v, want ErrExecutableNotFound", err)
	}
}
