package hostfork_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// detachedSpec is an environment that outlives the process that created
// it (bounded by its deadline).
var detachedSpec = spec.Environment{
	Purpose: "reopen test",
	Lifetime: spec.Lifetime{
		OwnerExit:  spec.OwnerExitDetach,
		MaxRuntime: spec.Duration(10 * time.Minute),
	},
}

// A command started by another process — an orchestrator that was then
// SIGKILLed — is reopened by id: Wait and WaitTree return its final
// record, and Logs with Follow streams its whole output, also what its
// descendants write after the leader's exit, until the tree is gone.
func TestReopenAfterOrchestratorKilled(t *testing.T) {
	parent := testutil.CgroupParent(t)
	root := t.TempDir()
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	t.Cleanup(func() { cleanStore(t, root, parent) })
	script := `i=1; while [ $i -le 300 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done
while [ ! -e ` + gate + ` ]; do sleep 0.02; done
echo after-gate
setsid sh -c 'sleep 0.3; echo from-grandchild' &
exit 7`
	c := startOrchestrator(t, orchestration{Root: root, CgroupParent: parent, Spec: detachedSpec,
		Commands: [][]string{{"sh", "-c", script}}, OwnerExit: spec.OwnerExitDetach})
	envID := c.next(t, "env")
	cmdID := c.next(t, "cmd")
	c.kill()

	ctx := ctxT(t)
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root, CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	cmd, err := h.OpenCommand(ctx, cmdID[:6])
	if err != nil {
		t.Fatal(err)
	}
	if cmd.ID() != cmdID || cmd.Record().Launcher == nil {
		t.Fatalf("reopened %s: %+v", cmd.ID(), cmd.Record())
	}
	env, err := h.OpenEnv(ctx, envID)
	if err != nil {
		t.Fatal(err)
	}
	if cmds, err := env.Commands(ctx); err != nil || len(cmds) != 1 || cmds[0].ID() != cmdID {
		t.Fatalf("the environment's commands: %v %d", err, len(cmds))
	}

	leader := make(chan hostfork.CommandRecord, 1)
	go func() {
		r, err := cmd.Wait(ctx)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		leader <- r
	}()

	logs, err := cmd.Logs(ctx, hostfork.LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&want, "out %d\n", i)
	}
	br := bufio.NewReader(logs)
	var got strings.Builder
	for !strings.HasSuffix(got.String(), "out 300\n") {
		line, err := br.ReadString('\n')
		got.WriteString(line)
		if err != nil {
			t.Fatalf("following the log before the gate: %v; read %q", err, got.String())
		}
	}
	select {
	case r := <-leader:
		t.Fatalf("Wait returned while the leader waits on its gate: %+v", r)
	default:
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	got.Write(rest)
	want.WriteString("after-gate\nfrom-grandchild\n")
	if got.String() != want.String() {
		t.Fatalf("followed stdout: %d bytes, want %d; the tail: %q", got.Len(), want.Len(), tail(got.String(), 80))
	}

	r := <-leader
	if r.ExitCode == nil || *r.ExitCode != 7 || r.LeaderState != hostfork.PhaseExited {
		t.Fatalf("Wait's record: exit %v leader %s", r.ExitCode, r.LeaderState)
	}
	rec, err := cmd.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Final() || rec.State != hostfork.CommandExited || rec.TreeState != hostfork.PhaseExited || rec.Liveness != hostfork.Exited ||
		rec.ExitCode == nil || *rec.ExitCode != 7 || rec.StopReason != "" || rec.TreeExitedAt == nil {
		t.Fatalf("WaitTree's record: %+v", rec)
	}
	if st, ok := hostfork.ExitStatus(rec); !ok || st != 7 {
		t.Fatalf("exit status %d %v", st, ok)
	}

	// Logs by byte offset: stderr from its second line; a reader past the
	// end gets EOF at once.
	errLogs, err := cmd.Logs(ctx, hostfork.LogOptions{Stream: "stderr", Offset: int64(len("err 1\n"))})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(errLogs)
	errLogs.Close()
	if err != nil || !strings.HasPrefix(string(b), "err 2\n") || !strings.HasSuffix(string(b), "err 300\n") {
		t.Fatalf("stderr from offset: %v %q...", err, tail(string(b), 40))
	}
	end, err := cmd.Logs(ctx, hostfork.LogOptions{Offset: int64(want.Len()), Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(end); err != nil || len(b) != 0 {
		t.Fatalf("following from the end of a finished command: %v %q", err, b)
	}
	end.Close()
	if _, err := cmd.Logs(ctx, hostfork.LogOptions{Stream: "stdin"}); !errors.Is(err, hostfork.ErrInvalid) {
		t.Errorf("an unknown stream: %v", err)
	}

	// The environment outlived its creator; this process stops it.
	if err := env.Stop(ctx, hostfork.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if er := env.Record(); er.State != hostfork.EnvStopped || er.StopReason != hostfork.ReasonUser {
		t.Fatalf("after stop: %s %q", er.State, er.StopReason)
	}
}

// A reopened handle on a live command another process started signals its
// leader (identity-checked) and stops its whole tree, a setsid'd
// descendant included.
func TestReopenedSignalAndStopTree(t *testing.T) {
	parent := testutil.CgroupParent(t)
	root := t.TempDir()
	dir := t.TempDir()
	t.Cleanup(func() { cleanStore(t, root, parent) })
	pidfile := filepath.Join(dir, "daemon.pid")
	trapper := `trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done`
	daemon := `setsid sh -c 'echo $$ > ` + pidfile + `.tmp; mv ` + pidfile + `.tmp ` + pidfile + `; exec sleep 300' & echo started; wait`
	c := startOrchestrator(t, orchestration{Root: root, CgroupParent: parent, Spec: detachedSpec,
		Commands: [][]string{{"sh", "-c", trapper}, {"sh", "-c", daemon}}, OwnerExit: spec.OwnerExitDetach})
	c.next(t, "env")
	trapID := c.next(t, "cmd")
	daemonID := c.next(t, "cmd")
	c.kill()

	ctx := ctxT(t)
	h, err := hostfork.Open(ctx, hostfork.Options{Root: root, CgroupParent: parent})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	trap, err := h.OpenCommand(ctx, trapID)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, trap, "ready\n")
	if err := trap.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rec, err := trap.WaitTree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ExitCode == nil || *rec.ExitCode != 9 || rec.StopReason != "" {
		t.Fatalf("after SIGTERM to the leader: %+v", rec)
	}
	if b, _ := os.ReadFile(rec.StdoutPath); string(b) != "ready\ngot-term\n" {
		t.Fatalf("stdout %q", b)
	}
	if err := trap.Signal(syscall.SIGTERM); !errors.Is(err, hostfork.ErrNotFound) {
		t.Errorf("signalling an exited leader: %v, want ErrNotFound", err)
	}

	d, err := h.OpenCommand(ctx, daemonID)
	if err != nil {
		t.Fatal(err)
	}
	id := waitPIDFile(t, pidfile)
	stopped, err := d.StopTree(ctx, hostfork.StopOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !stopped.Final() || stopped.TreeState != hostfork.PhaseExited || stopped.StopReason != hostfork.ReasonUser {
		t.Fatalf("StopTree through the reopened handle: %+v", stopped)
	}
	wantGone(t, "the setsid'd daemon", id)
	if r, err := d.WaitTree(ctx); err != nil || r.StopReason != hostfork.ReasonUser {
		t.Fatalf("WaitTree after the stop: %v %+v", err, r)
	}
}

// waitLog follows a command's stdout until it has printed want.
func waitLog(t *testing.T, c *hostfork.Command, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.Logs(ctx, hostfork.LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != want {
		t.Fatalf("%s printed %q (%v), want %q", c.ID(), buf, err, want)
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
