package server_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
)

// TestRunsResolvePlan: the endpoints the CLI's --host uses beyond the
// cycle: POST /v1/runs (an auto-stop environment with its first command),
// GET /v1/resolve/{id}, POST /v1/plan, GET /v1/usage/btrfs, and stop's
// reason and grace=0.
func TestRunsResolvePlan(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, 2*time.Minute)

	env, err := c.Run(ctx, client.RunRequest{
		Env:     map[string]any{"purpose": "a run", "lifetime": map[string]any{"max_runtime": "5m"}, "env": map[string]string{"TOKEN": "t0p"}},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", "echo ran; exit 3"}, Labels: map[string]string{"k": "v"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !env.AutoStop || env.OwnerExit != api.OwnerExitDetach || len(env.Commands) != 1 || env.Commands[0].Labels["k"] != "v" {
		t.Fatalf("POST /v1/runs: auto_stop %v, owner_exit %s, commands %d", env.AutoStop, env.OwnerExit, len(env.Commands))
	}
	if strings.Contains(string(env.Spec), "t0p") {
		t.Errorf("the spec's values are not redacted: %s", env.Spec)
	}
	cmd := env.Commands[0]
	rec, err := c.Wait(ctx, cmd.ID, client.WaitTree)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := rec.ExitStatus(); !ok || st != 3 {
		t.Fatalf("the run's command: status %d (%v)", st, ok)
	}
	// The environment stops by itself once the command's tree has exited.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.Env(ctx, env.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == api.EnvStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's environment did not stop: %s (due %q)", got.State, got.Due)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if e, err := c.Env(ctx, env.ID, client.ShowEnv()); err != nil || !strings.Contains(string(e.Spec), "t0p") {
		t.Errorf("show_env=1: %v %s", err, e.Spec)
	}

	// Refused before anything is made: no lifetime, a missing program,
	// owner_exit stop, admit wait.
	before := envsSnapshot(t, e)
	for _, tc := range []struct {
		req   client.RunRequest
		cause string
		exit  int
	}{
		{client.RunRequest{Env: map[string]any{}, Command: client.CommandRequest{Argv: []string{"true"}}}, "invalid", 122},
		{client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "1m"}}, Command: client.CommandRequest{Argv: []string{"no-such-program-of-hostfork"}}}, "executable_not_found", 127},
		{client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "1m", "owner_exit": "stop"}}, Command: client.CommandRequest{Argv: []string{"true"}}}, "invalid", 122},
		{client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "1m"}}, Command: client.CommandRequest{Argv: []string{"true"}, Workload: "agent", Admit: "wait"}}, "invalid", 122},
		{client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "1m"}}}, "invalid", 122},
	} {
		_, err := c.Run(ctx, tc.req)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Cause != tc.cause || ce.ExitCode != tc.exit || ce.Status != 422 {
			t.Errorf("run %+v: %v (%+v), want %s/%d", tc.req, err, ce, tc.cause, tc.exit)
		}
	}
	body, code := curl(t, s.Socket, "-X", "POST", "-d", `{"env":{"lifetime":{"max_runtime":"1m"}},"command":{"argv":["true"]},"extra":1}`, "http://localhost/v1/runs")
	if code != 400 {
		t.Errorf("POST /v1/runs with an unknown field: %d %s", code, body)
	}
	if after := envsSnapshot(t, e); after != before {
		t.Errorf("a refused run made something:\nbefore %s\nafter %s", before, after)
	}

	// Resolve: an environment, a command, prefixes, unknown and ambiguous.
	if kind, id, err := c.Resolve(ctx, env.ID[:5]); err != nil || kind != "env" || id != env.ID {
		t.Errorf("resolve %s: %s %s %v", env.ID[:5], kind, id, err)
	}
	if kind, id, err := c.Resolve(ctx, cmd.ID); err != nil || kind != "command" || id != cmd.ID {
		t.Errorf("resolve %s: %s %s %v", cmd.ID, kind, id, err)
	}
	if _, _, err := c.Resolve(ctx, "zzzzzzzzzz"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("resolve of an unknown id: %v", err)
	}

	// Plan: the library's plan, nothing made; no lifetime needed.
	raw, err := c.Plan(ctx, map[string]any{"limits": map[string]any{"memory": "1G"}, "lifetime": map[string]any{"max_runtime": "10m"}})
	if err != nil {
		t.Fatal(err)
	}
	var plan struct {
		Tier       string `json:"tier"`
		MaxRuntime string `json:"max_runtime"`
		Limits     []struct {
			Resource string `json:"resource"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(raw, &plan); err != nil || plan.Tier == "" || plan.MaxRuntime != "10m0s" || len(plan.Limits) != 1 {
		t.Errorf("plan: %v %s", err, raw)
	}
	if _, err := c.Plan(ctx, map[string]any{"trees": map[string]any{"x": map[string]any{"kind": "nope"}}}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("plan of a bad spec: %v", err)
	}
	if after := envsSnapshot(t, e); after != before {
		t.Errorf("a plan made something")
	}

	// Btrfs sizes: none here, an empty list.
	if sizes, err := c.BtrfsSizes(ctx); err != nil || sizes == nil || len(sizes) != 0 {
		t.Errorf("btrfs sizes: %v %v", sizes, err)
	}

	// Stop with a reason, and grace=0 (kill at once).
	live, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "5m", "grace": "30s"}})
	if err != nil {
		t.Fatal(err)
	}
	trap, err := c.StartCommand(ctx, live.ID, client.CommandRequest{Argv: []string{"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := c.Logs(ctx, trap.ID, client.LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(rd).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the trapping command: %q %v", line, err)
	}
	rd.Close()
	t0 := time.Now()
	stopped, err := c.StopCommand(ctx, trap.ID, client.StopOptions{Grace: -1, Reason: api.ReasonOwnerExit})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("grace=0 took %v (the environment's grace is 30s)", d)
	}
	if stopped.StopReason != api.ReasonOwnerExit || !stopped.Final() {
		t.Errorf("stopped with reason owner-exit: %s, %s", stopped.StopReason, stopped.State)
	}
	body, code = curl(t, s.Socket, "-X", "POST", "http://localhost/v1/commands/"+trap.ID+"/stop?reason=deadline")
	if code != 422 {
		t.Errorf("stop with reason=deadline: %d %s", code, body)
	}

	// Baselines and retention.
	base := filepath.Join(e.Dir, "base")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if bs, err := c.Baselines(ctx); err != nil || bs == nil || len(bs) != 0 {
		t.Errorf("no baselines: %v %v", bs, err)
	}
	if _, err := c.AddBaseline(ctx, "rel", "relative/dir"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a relative baseline path: %v", err)
	}
	b, err := c.AddBaseline(ctx, "b1", base)
	if err != nil || b.Name != "b1" || b.Path != base || b.Kind == "" {
		t.Fatalf("add baseline: %+v %v", b, err)
	}
	if bs, err := c.Baselines(ctx); err != nil || len(bs) != 1 || bs[0].Name != "b1" {
		t.Errorf("baselines: %v %v", bs, err)
	}
	if err := c.RemoveBaseline(ctx, "b1"); err != nil {
		t.Errorf("remove baseline: %v", err)
	}
	if err := c.RemoveBaseline(ctx, "b1"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("remove a baseline twice: %v", err)
	}
	zero := api.Duration(0)
	rep, err := c.GC(ctx, client.GCRequest{DryRun: true, RetainTrees: &zero, RetainEvidence: &zero})
	if err != nil || !rep.DryRun || len(rep.Deleted) == 0 {
		t.Errorf("gc --dry-run with no retention: %+v %v", rep, err)
	}
	if _, err := c.Env(ctx, env.ID); err != nil {
		t.Errorf("a dry run deleted the stopped environment's record: %v", err)
	}
	body, code = curl(t, s.Socket, "-X", "POST", "-d", `{"retain_trees":"-1s"}`, "http://localhost/v1/gc")
	if code/100 != 4 {
		t.Errorf("gc with a negative retention: %d %s", code, body)
	}
}

// TestLogsCutIsNotAnEnd: a followed log cut by the server's shutdown ends
// with an error, not with the clean end of a tree that exited, so a
// client resumes instead of taking it for the whole output.
func TestLogsCutIsNotAnEnd(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, time.Minute)
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sh", "-c", "echo first; sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := c.Logs(ctx, cmd.ID, client.LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := make([]byte, len("first\n"))
	if _, err := io.ReadFull(rd, got); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(t); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
	rest, err := io.ReadAll(rd)
	if err == nil || len(rest) != 0 {
		t.Fatalf("a follow cut by the shutdown ended cleanly (%q, %v): a client would take it for the whole output", rest, err)
	}
}

// TestSocketActivation: serve takes the socket a .socket unit passes
// (LISTEN_PID/LISTEN_FDS, descriptor 3), leaves its file in place when it
// stops, and does not pass LISTEN_* on to the commands it starts.
func TestSocketActivation(t *testing.T) {
	e := servertest.New(t)
	path := filepath.Join(e.Dir, "activated.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	lf, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()

	serve := func() (*exec.Cmd, <-chan struct{}) {
		// As systemd does: LISTEN_PID is the server's own pid (the shell
		// execs it), the socket is descriptor 3.
		cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=api exec "$0" serve`, e.Bin)
		cmd.Env = e.Environ()
		cmd.ExtraFiles = []*os.File{lf}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
		sc := bufio.NewScanner(out)
		var lines []string
		for len(lines) < 2 && sc.Scan() {
			lines = append(lines, sc.Text())
		}
		go func() { _, _ = io.Copy(io.Discard, out) }()
		if len(lines) < 2 || lines[0] != "hostfork serve: listening on unix://"+path || !strings.Contains(lines[1], "socket activation") {
			t.Fatalf("serve with an inherited socket said %q", lines)
		}
		return cmd, done
	}
	cmd, done := serve()
	c, err := client.New("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxFor(t, time.Minute)
	env, err := c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "1m"}},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", `env | grep '^LISTEN_' || echo none`}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, env.Commands[0].ID, client.WaitTree); err != nil {
		t.Fatal(err)
	}
	rd, err := c.Logs(ctx, env.Commands[0].ID, client.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(rd)
	rd.Close()
	if string(out) != "none\n" {
		t.Errorf("the command inherited %q", out)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
	if st, err := os.Lstat(path); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the socket unit's file after the server stopped: %v %v", st, err)
	}
	// The socket still listens (systemd's): the next server takes it.
	serve()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("the second activated server: %v", err)
	}

	// A LISTEN_PID of another process is not for serve: it makes its own
	// socket.
	other := exec.Command(e.Bin, "serve", "--socket", filepath.Join(e.Dir, "own.sock"))
	other.Env = append(e.Environ(), "LISTEN_PID=1", "LISTEN_FDS=1")
	stdout, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Signal(syscall.SIGTERM); _ = other.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "hostfork serve: listening on unix://"+filepath.Join(e.Dir, "own.sock")+"\n" {
		t.Errorf("serve with another process's LISTEN_PID: %q", line)
	}
}

// TestCLIFilesAndExtend: hostfork cp, ls and extend through --host, on an
// environment with a view (its tree's files, resolved in the view).
func TestCLIFilesAndExtend(t *testing.T) {
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
	host := "--host=unix://" + s.Socket
	in := filepath.Join(e.Dir, "in.txt")
	if err := os.WriteFile(in, []byte("through the server\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := e.CLI(host, "cp", in, env.ID+":"+target+"/"); err != nil {
		t.Fatalf("cp in: %v %s", err, out)
	}
	out, err := e.CLI(host, "ls", "--json", env.ID, target)
	if err != nil {
		t.Fatalf("ls: %v %s", err, out)
	}
	var es []api.DirEntry
	if err := json.Unmarshal(out, &es); err != nil || len(es) != 2 || es[0].Path != "a.txt" || es[1].Path != "in.txt" || es[1].Mode != "-rw-------" {
		t.Fatalf("ls --json: %v %s", err, out)
	}
	back := filepath.Join(e.Dir, "back")
	if out, err := e.CLI(host, "cp", env.ID+":"+target, back); err != nil {
		t.Fatalf("cp out: %v %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(back, "in.txt")); err != nil || string(b) != "through the server\n" {
		t.Fatalf("copied back: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(target, "in.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the write reached the host's directory under the view: %v", err)
	}
	if out, err := e.CLI(host, "extend", env.ID, "--ttl", "30m"); err != nil || !strings.Contains(string(out), "deadline moved") {
		t.Fatalf("extend: %v %s", err, out)
	}
	if _, err := c.StopEnv(ctx, env.ID, client.StopOptions{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
}
