package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

func newClient(t *testing.T, s *servertest.Serve) *client.Client {
	t.Helper()
	c, err := client.New("unix://" + s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// treeSource makes a directory for a copy tree and the directory its view
// replaces with it.
func treeSource(t *testing.T, e *servertest.Env) (src, target string) {
	src, target = filepath.Join(e.Dir, "src"), filepath.Join(e.Dir, "target")
	for _, d := range []string{src, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return src, target
}

const cycleScript = `echo one; cat "$W/a.txt"; echo made > "$W/b.txt"; echo two; echo err >&2`

// TestCycleClient: create → command → logs follow → wait → stop → export
// through the Go client, against a real server.
func TestCycleClient(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, 2*time.Minute)
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Version(ctx); err != nil || v.GoVersion == "" {
		t.Fatalf("version: %+v, %v", v, err)
	}
	src, target := treeSource(t, e)
	env, err := c.CreateEnv(ctx, map[string]any{
		"purpose": "cycle", "labels": map[string]string{"test": "cycle"},
		"lifetime": map[string]any{"max_runtime": "5m"},
		"trees":    map[string]any{"work": map[string]any{"kind": "copy", "source": src}},
		"view":     map[string]any{"replace": map[string]string{target: "work"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if env.State != api.EnvActive || env.OwnerExit != api.OwnerExitDetach || len(env.Trees) != 1 {
		t.Fatalf("created environment: state %s, owner_exit %s, trees %v", env.State, env.OwnerExit, env.Trees)
	}
	work := env.Trees[0].WorkloadPath
	cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sh", "-c", cycleScript}, Env: []string{"W=" + work}, Purpose: "cycle", Labels: map[string]string{"step": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Env != env.ID || cmd.Output != api.OutputFiles {
		t.Fatalf("command: env %s output %s", cmd.Env, cmd.Output)
	}
	rd, err := c.Logs(ctx, cmd.ID, client.LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || string(out) != "one\nhello\ntwo\n" {
		t.Fatalf("logs follow: %q, %v", out, err)
	}
	rd, err = c.Logs(ctx, cmd.ID, client.LogOptions{Stream: "stderr"})
	if err != nil {
		t.Fatal(err)
	}
	serr, _ := io.ReadAll(rd)
	rd.Close()
	if string(serr) != "err\n" {
		t.Fatalf("stderr: %q", serr)
	}
	rec, err := c.Wait(ctx, cmd.ID, client.WaitTree)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := rec.ExitStatus(); !ok || st != 0 || !rec.Final() {
		t.Fatalf("wait: status %d (%v), record_state %s", st, ok, rec.State)
	}
	cmds, err := c.Commands(ctx, api.CommandFilter{Env: env.ID[:6], Labels: api.Selector{"step=1"}})
	if err != nil || len(cmds) != 1 || cmds[0].ID != cmd.ID {
		t.Fatalf("commands by env prefix and label: %v, %v", cmds, err)
	}
	envs, err := c.Envs(ctx, api.EnvFilter{Labels: api.Selector{"test=cycle"}})
	if err != nil || len(envs) != 1 || len(envs[0].Commands) != 1 {
		t.Fatalf("envs by label: %d, %v", len(envs), err)
	}
	// Files in and out of the view, through the server.
	wctx, wcancel := context.WithCancel(ctx)
	changes := make(chan api.FileEvent, 16)
	watching := make(chan struct{})
	go func() {
		defer close(changes)
		for ev, err := range c.Watch(wctx, env.ID, work, true) {
			if err != nil {
				return
			}
			if ev.Op == "ready" {
				close(watching)
				continue
			}
			select {
			case changes <- ev:
			default:
			}
		}
	}()
	select {
	case <-watching:
	case <-time.After(30 * time.Second):
		t.Fatal("the watch was not in place within 30 s")
	}
	if err := c.Mkdir(ctx, env.ID, work+"/in", 0o750); err != nil {
		t.Fatal(err)
	}
	if e, err := c.WriteFile(ctx, env.ID, work+"/in/put.txt", strings.NewReader("put\n"), 0o600); err != nil || e.Size != 4 || e.Mode != "-rw-------" {
		t.Fatalf("write: %+v %v", e, err)
	}
	rd, err = c.ReadFile(ctx, env.ID, work+"/in/put.txt")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rd); string(b) != "put\n" {
		t.Fatalf("read back %q", b)
	}
	rd.Close()
	if es, err := c.ReadDir(ctx, env.ID, work, 0); err != nil || !slices.ContainsFunc(es, func(e api.DirEntry) bool { return e.Path == "in/put.txt" }) {
		t.Fatalf("list: %+v %v", es, err)
	}
	if _, err := c.WriteFile(ctx, env.ID, work+"/missing/x", strings.NewReader("x"), 0); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("write below a missing directory: %v", err)
	}
	if _, err := c.ReadFile(ctx, env.ID, "relative"); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("read of a relative path: %v", err)
	}
	select {
	case ev := <-changes:
		if !strings.HasPrefix(ev.Path, work+"/in") {
			t.Errorf("first change %+v", ev)
		}
	case <-time.After(30 * time.Second):
		t.Error("no change reported within 30 s")
	}
	wcancel()
	moved, err := c.Extend(ctx, env.ID[:6], api.DeadlineRequest{TTL: api.Duration(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(moved.DeadlineMoves) != 1 || moved.DeadlineAt == nil || !moved.DeadlineAt.After(*env.DeadlineAt) || len(moved.Commands) != 1 {
		t.Fatalf("extend: deadline %v (was %v), moves %+v, %d commands", moved.DeadlineAt, env.DeadlineAt, moved.DeadlineMoves, len(moved.Commands))
	}
	if _, err := c.Extend(ctx, env.ID, api.DeadlineRequest{}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("extend without a deadline: %v, want ErrInvalid", err)
	}
	stopped, err := c.StopEnv(ctx, env.ID, client.StopOptions{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if stopped.State != api.EnvStopped {
		t.Fatalf("stopped environment: %s", stopped.State)
	}
	dest := filepath.Join(e.Dir, "export")
	res, err := c.Export(ctx, env.ID, "work", dest)
	if err != nil {
		t.Fatal(err)
	}
	if res.Label != api.ExportComplete {
		t.Fatalf("export: %s", res.Label)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "b.txt")); err != nil || string(b) != "made\n" {
		t.Fatalf("exported b.txt: %q, %v", b, err)
	}
	if _, err := c.Export(ctx, env.ID, "work", dest); !errors.Is(err, api.ErrExists) {
		t.Fatalf("export over an existing destination: %v, want ErrExists", err)
	}
	_, err = c.Env(ctx, "zzzzzzzz")
	if !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("unknown id: %v, want ErrNotFound", err)
	}
	if code, ok := client.ExitCode(err); !ok || code != 119 {
		t.Fatalf("unknown id: exit code %d (%v), want 119", code, ok)
	}
	if _, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"true"}}); !errors.Is(err, api.ErrEnvNotActive) {
		t.Fatalf("command in a stopped environment: %v, want ErrEnvNotActive", err)
	}
}

// curl runs curl on the socket and returns the body and the status.
func curl(t *testing.T, socket string, args ...string) ([]byte, int) {
	t.Helper()
	argv := append([]string{"-sS", "--unix-socket", socket, "-w", "\n%{http_code}"}, args...)
	out, err := exec.Command("curl", argv...).Output()
	if err != nil {
		t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	i := bytes.LastIndexByte(out, '\n')
	code, _ := strconv.Atoi(string(out[i+1:]))
	return out[:i], code
}

func curlJSON(t *testing.T, socket string, want int, v any, args ...string) {
	t.Helper()
	body, code := curl(t, socket, args...)
	if code != want {
		t.Fatalf("curl %v: status %d, want %d: %s", args, code, want, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("curl %v: %v: %s", args, err, body)
		}
	}
}

// TestCycleCurl is the same cycle through curl --unix-socket.
func TestCycleCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		testutil.Skip(t, "curl not found (apt-get install curl)")
	}
	e := servertest.New(t)
	s := e.Serve()
	sock := s.Socket
	src, target := treeSource(t, e)
	var env api.Env
	curlJSON(t, sock, 201, &env, "-X", "POST", "http://localhost/v1/envs",
		"-d", fmt.Sprintf(`{"lifetime":{"max_runtime":"5m"},"trees":{"work":{"kind":"copy","source":%q}},"view":{"replace":{%q:"work"}}}`, src, target))
	var cmd api.Command
	body, _ := json.Marshal(client.CommandRequest{Argv: []string{"sh", "-c", cycleScript}, Env: []string{"W=" + env.Trees[0].WorkloadPath}})
	curlJSON(t, sock, 201, &cmd, "-X", "POST", "http://localhost/v1/envs/"+env.ID+"/commands", "-d", string(body))
	out, code := curl(t, sock, "-N", "http://localhost/v1/commands/"+cmd.ID+"/logs?follow=1")
	if code != 200 || string(out) != "one\nhello\ntwo\n" {
		t.Fatalf("logs: %d %q", code, out)
	}
	out, _ = curl(t, sock, "http://localhost/v1/commands/"+cmd.ID+"/logs?offset=4")
	if string(out) != "hello\ntwo\n" {
		t.Fatalf("logs from offset 4: %q", out)
	}
	var rec api.Command
	curlJSON(t, sock, 200, &rec, "http://localhost/v1/commands/"+cmd.ID+"/wait?condition=tree")
	if rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("wait: %+v", rec.ExitCode)
	}
	curlJSON(t, sock, 200, &env, "-X", "POST", "http://localhost/v1/envs/"+env.ID+"/stop?grace=1s")
	if env.State != api.EnvStopped {
		t.Fatalf("stop: %s", env.State)
	}
	dest := filepath.Join(e.Dir, "export")
	var res api.ExportResult
	curlJSON(t, sock, 200, &res, "-X", "POST", "http://localhost/v1/envs/"+env.ID+"/export", "-d", fmt.Sprintf(`{"tree":"work","destination":%q}`, dest))
	if b, err := os.ReadFile(filepath.Join(dest, "b.txt")); err != nil || string(b) != "made\n" || res.Label != api.ExportComplete {
		t.Fatalf("export: %s, b.txt %q, %v", res.Label, b, err)
	}
	// The header every response carries, also errors.
	hdr, _ := exec.Command("curl", "-sS", "-D", "-", "-o", "/dev/null", "--unix-socket", sock, "http://localhost/v1/envs/nonexistent").Output()
	if !bytes.Contains(hdr, []byte("Hostfork-API-Version: 1")) || !bytes.Contains(hdr, []byte(" 404")) {
		t.Fatalf("headers of a 404: %s", hdr)
	}
	for _, p := range []string{"/v1/_ping", "/v1/version", "/v1/capacity", "/v1/usage", "/v1/doctor", "/v1/openapi.json"} {
		curlJSON(t, sock, 200, nil, "http://localhost"+p)
	}
	var rep api.ReapReport
	curlJSON(t, sock, 200, &rep, "-X", "POST", "http://localhost/v1/reap")
	var ps client.PauseState
	curlJSON(t, sock, 200, &ps, "-X", "POST", "http://localhost/v1/pause")
	if !ps.Paused {
		t.Fatal("pause: not paused")
	}
	curlJSON(t, sock, 200, &ps, "-X", "POST", "http://localhost/v1/resume")
	if ps.Paused {
		t.Fatal("resume: still paused")
	}
}

// errorBody checks an error answer's JSON body.
func errorBody(t *testing.T, what string, body []byte, cause string, exit int) {
	t.Helper()
	var eb client.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Message == "" {
		t.Errorf("%s: not a JSON error body: %q (%v)", what, body, err)
		return
	}
	if eb.Cause != cause || eb.ExitCode != exit {
		t.Errorf("%s: cause %q exit %d, want %q %d (%s)", what, eb.Cause, eb.ExitCode, cause, exit, eb.Message)
	}
}

// serveOpenToOthers starts a server whose socket another user can
// connect to: in a directory they can reach (the store is private), mode
// 0666, so that only the server's own checks stand between them and it.
func serveOpenToOthers(t *testing.T, e *servertest.Env) *servertest.Serve {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "hostfork-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := e.Serve("--socket", filepath.Join(sockDir, "api.sock"))
	if err := os.Chmod(s.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOtherUserRefused: a second, unprivileged user that the kernel lets
// connect is refused by the server itself (403 JSON) on every endpoint; a
// request with an Origin, a Referer or a foreign Host is refused too.
func TestOtherUserRefused(t *testing.T) {
	for _, tool := range []string{"curl", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Skip(t, tool+" not found")
		}
	}
	e := servertest.New(t)
	name := testutil.NewUser(t, "hfapi", testutil.UserOptions{}).Name
	s := serveOpenToOthers(t, e)
	c := newClient(t, s)
	ctx := ctxFor(t, time.Minute)
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}

	// Every endpoint the server documents (so a new one can't be missed).
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	curlJSON(t, s.Socket, 200, &doc, "http://localhost/v1/openapi.json")
	if len(doc.Paths) < 20 {
		t.Fatalf("the OpenAPI document lists only %d paths", len(doc.Paths))
	}
	var paths []string
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	n := 0
	for _, p := range paths {
		for method := range doc.Paths[p] {
			id := env.ID
			if strings.HasPrefix(p, "/v1/commands/") {
				id = cmd.ID
			}
			url := "http://localhost" + strings.ReplaceAll(p, "{id}", id)
			argv := []string{"--reuid=" + name, "--regid=" + name, "--clear-groups", "curl", "-sS", "--max-time", "20",
				"--unix-socket", s.Socket, "-X", strings.ToUpper(method), "-w", "\n%{http_code}", url}
			if method == "post" {
				argv = append(argv, "-d", `{"argv":["true"],"signal":"KILL","tree":"x","destination":"/tmp/x","lifetime":{"until_stopped":true}}`)
			}
			out, err := exec.Command("setpriv", argv...).Output()
			if err != nil {
				t.Fatalf("%s %s as %s: %v: %s", method, p, name, err, out)
			}
			i := bytes.LastIndexByte(out, '\n')
			if code := string(out[i+1:]); code != "403" {
				t.Errorf("%s %s as another user: status %s, want 403: %s", method, p, code, out[:i])
				continue
			}
			errorBody(t, method+" "+p, out[:i], "forbidden", 116)
			n++
		}
	}
	t.Logf("%d endpoints refused the other user", n)
	// Nothing it asked for happened.
	if rec, err := c.Command(ctx, cmd.ID); err != nil || rec.Liveness != api.Alive {
		t.Fatalf("the command after the other user's stop/signal: %v, %v", rec, err)
	}
	if capa, err := c.Capacity(ctx); err != nil || capa.Paused {
		t.Fatalf("admission after the other user's pause: %v, %v", capa, err)
	}
	envs, err := c.Envs(ctx, api.EnvFilter{})
	if err != nil || len(envs) != 1 {
		t.Fatalf("environments after the other user's create: %d, %v", len(envs), err)
	}

	for _, h := range [][]string{{"-H", "Origin: http://localhost"}, {"-H", "Referer: http://example.com/"}, {"-H", "Host: evil.example"}} {
		for _, path := range []string{"/v1/_ping", "/v1/envs", "/metrics"} {
			body, code := curl(t, s.Socket, append(h, "http://localhost"+path)...)
			if code != 403 {
				t.Errorf("%v %s: status %d, want 403", h, path, code)
				continue
			}
			errorBody(t, strings.Join(h, " ")+" "+path, body, "forbidden", 116)
		}
	}
	body, code := curl(t, s.Socket, "-X", "POST", "-H", "Origin: http://localhost", "-d", `{"lifetime":{"max_runtime":"5m"}}`, "http://localhost/v1/envs")
	if code != 403 {
		t.Fatalf("POST /v1/envs with Origin: %d %s", code, body)
	}
	if envs, _ := c.Envs(ctx, api.EnvFilter{}); len(envs) != 1 {
		t.Fatalf("a refused create made an environment: %d", len(envs))
	}
}

// TestServeKilled: serve SIGKILLed while a command runs; the command runs
// on; a restarted serve reports it, waits for it, and follows its logs from
// the offset the client had.
func TestServeKilled(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, 2*time.Minute)
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}})
	if err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(e.Dir, "gate")
	cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{
		Argv: []string{"sh", "-c", `echo first; while [ ! -e "$G" ]; do sleep 0.02; done; echo second`}, Env: []string{"G=" + gate}})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := c.Logs(ctx, cmd.ID, client.LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("first\n"))
	if _, err := io.ReadFull(rd, got); err != nil || string(got) != "first\n" {
		t.Fatalf("first line: %q, %v", got, err)
	}
	offset := int64(len(got))
	live, err := c.Command(ctx, cmd.ID)
	if err != nil || live.PID == nil {
		t.Fatalf("the running command: %+v, %v", live, err)
	}
	pid := *live.PID
	s.Kill(t)
	rd.Close()
	if pid == 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("the command's leader (pid %d) did not survive the server's SIGKILL", pid)
	}

	s2 := e.Serve() // the stale socket in the store is replaced
	c2 := newClient(t, s2)
	rec, err := c2.Command(ctx, cmd.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Liveness != api.Alive || rec.PID == nil || *rec.PID != pid {
		t.Fatalf("restarted server reports %s (pid %v), want alive pid %d", rec.Liveness, rec.PID, pid)
	}
	rd, err = c2.Logs(ctx, cmd.ID, client.LogOptions{Follow: true, Offset: offset})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rd)
	if err != nil || string(rest) != "second\n" {
		t.Fatalf("logs from offset %d after the restart: %q, %v", offset, rest, err)
	}
	final, err := c2.Wait(ctx, cmd.ID, client.WaitTree)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := final.ExitStatus(); !ok || st != 0 {
		t.Fatalf("wait after the restart: status %d (%v)", st, ok)
	}
}

// TestEventsResume: a consumer disconnected mid-stream resumes with since
// and misses nothing, sees nothing twice.
func TestEventsResume(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, 2*time.Minute)
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}})
	if err != nil {
		t.Fatal(err)
	}
	produce := func(n int) {
		for i := 0; i < n; i++ {
			cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"true"}})
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := c.Wait(ctx, cmd.ID, client.WaitTree); err != nil {
				t.Error(err)
				return
			}
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); produce(4) }()

	var seen []int64
	first, cancel := context.WithCancel(ctx)
	for ev, err := range c.Events(first, 0, true) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Seq)
		if len(seen) == 3 {
			cancel() // leave mid-stream, while events are being written
			break
		}
	}
	cancel()
	<-done
	produce(2)
	// Everything that exists now.
	var all []int64
	for ev, err := range c.Events(ctx, 0, false) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ev.Seq)
	}
	last := all[len(all)-1]
	resumed, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	for ev, err := range c.Events(resumed, seen[len(seen)-1], true) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Seq)
		if ev.Seq >= last {
			break
		}
	}
	if fmt.Sprint(seen) != fmt.Sprint(all) {
		t.Fatalf("first stream + resumed stream:\n%v\nthe log:\n%v", seen, all)
	}
	for i := range all {
		if all[i] != int64(i+1) {
			t.Fatalf("event sequences are not 1..n: %v", all)
		}
	}
	t.Logf("%d events, resumed after seq %d", len(all), seen[2])
}

// scrape reads /metrics through the client's socket with curl and parses
// it with the Prometheus text parser.
func scrape(t *testing.T, socket string) (map[string]*dtoFamily, []byte) {
	t.Helper()
	body, code := curl(t, socket, "http://localhost/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	return parseMetrics(t, body), body
}

type dtoFamily = struct {
	Type    string
	Metrics map[string]float64 // by the env/state/kind label value ("" for none)
}

func parseMetrics(t *testing.T, body []byte) map[string]*dtoFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	out := map[string]*dtoFamily{}
	for name, f := range fams {
		df := &dtoFamily{Type: f.GetType().String(), Metrics: map[string]float64{}}
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key = l.GetValue()
			}
			switch {
			case m.Gauge != nil:
				df.Metrics[key] = m.GetGauge().GetValue()
			case m.Counter != nil:
				df.Metrics[key] = m.GetCounter().GetValue()
			case m.Histogram != nil:
				df.Metrics[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
		out[name] = df
	}
	return out
}

func readUint(t *testing.T, path string) float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMetrics: /metrics parsed with expfmt; the OOM counter rises when a
// command is OOM-killed; memory bytes match the cgroup's own counter; the
// scrape passes promtool; --metrics-listen serves /metrics only.
func TestMetrics(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve("--metrics-listen", "127.0.0.1:0")
	c := newClient(t, s)
	ctx := ctxFor(t, 3*time.Minute)
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}, "limits": map[string]any{"memory": "64M"}})
	if err != nil {
		t.Fatal(err)
	}
	// Its limit groups (cgroup v1 here) go with its stop, also when the
	// test fails.
	t.Cleanup(func() { _, _ = c.StopEnv(context.Background(), env.ID, client.StopOptions{}) })
	var groups struct {
		Mechanisms map[string]string `json:"mechanisms"`
		V1         map[string]string `json:"v1"`
		V2         string            `json:"v2"`
	}
	if err := json.Unmarshal(env.Limits, &groups); err != nil {
		t.Fatalf("limits record: %v: %s", err, env.Limits)
	}
	var usageFile string
	switch groups.Mechanisms["memory"] {
	case "cgroup1":
		usageFile = filepath.Join(groups.V1["memory"], "memory.usage_in_bytes")
	case "cgroup2":
		usageFile = filepath.Join(groups.V2, "memory.current")
	default:
		testutil.Skip(t, "no memory limit mechanism on this host: "+string(env.Limits))
	}
	sleeper, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sleep", "120"}})
	if err != nil {
		t.Fatal(err)
	}

	before := readUint(t, usageFile)
	m, body := scrape(t, s.Socket)
	after := readUint(t, usageFile)
	mem, ok := m["hostfork_env_memory_bytes"].Metrics[env.ID]
	if !ok {
		t.Fatalf("no hostfork_env_memory_bytes for %s:\n%s", env.ID, body)
	}
	lo, hi := min(before, after), max(before, after)
	if slack := 256.0 * 1024; mem < lo-slack || mem > hi+slack {
		t.Fatalf("hostfork_env_memory_bytes %v, the cgroup's %s read %v and %v", mem, usageFile, before, after)
	}
	if lim := m["hostfork_env_memory_limit_bytes"].Metrics[env.ID]; lim != 64<<20 {
		t.Fatalf("hostfork_env_memory_limit_bytes %v, want %d", lim, 64<<20)
	}
	oom0, ok := m["hostfork_env_oom_kills_total"].Metrics[env.ID]
	if !ok {
		t.Fatalf("no hostfork_env_oom_kills_total for %s:\n%s", env.ID, body)
	}
	for _, name := range []string{"hostfork_envs", "hostfork_commands", "hostfork_admission_slots", "hostfork_paused", "hostfork_unverified_trees",
		"hostfork_store_bytes", "hostfork_cleanup_backlog", "hostfork_launch_duration_seconds", "hostfork_env_pids", "hostfork_env_cpu_seconds_total"} {
		if m[name] == nil {
			t.Errorf("no %s in the scrape", name)
		}
	}
	if m["hostfork_envs"].Metrics["active"] != 1 || m["hostfork_launch_duration_seconds"].Metrics[""] != 1 {
		t.Errorf("hostfork_envs{active} %v, launches %v", m["hostfork_envs"].Metrics["active"], m["hostfork_launch_duration_seconds"].Metrics[""])
	}

	hog, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"/usr/bin/python3", "-c", "x = bytearray(300 << 20); print(len(x))"}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Wait(ctx, hog.ID, client.WaitTree)
	if err != nil {
		t.Fatal(err)
	}
	if rec.OOM == nil || !*rec.OOM {
		t.Fatalf("the allocation was not OOM-killed: exit %v signal %v oom %v (%s)", rec.ExitCode, rec.Signal, rec.OOM, rec.OOMEvidence)
	}
	m, body = scrape(t, s.Socket)
	if oom := m["hostfork_env_oom_kills_total"].Metrics[env.ID]; oom < oom0+1 {
		t.Fatalf("hostfork_env_oom_kills_total %v after an OOM kill (was %v):\n%s", oom, oom0, body)
	}

	t.Run("promtool", func(t *testing.T) {
		if _, err := exec.LookPath("promtool"); err != nil {
			testutil.Skip(t, "promtool not found (apt-get install prometheus)")
		}
		cmd := exec.Command("promtool", "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s", err, out)
		}
	})

	t.Run("tcp", func(t *testing.T) {
		if s.Metrics == "" {
			t.Fatal("no metrics address printed")
		}
		resp, err := http.Get("http://" + s.Metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || parseMetrics(t, b)["hostfork_envs"] == nil {
			t.Fatalf("tcp /metrics: %d\n%s", resp.StatusCode, b)
		}
		resp, err = http.Get("http://" + s.Metrics + "/v1/envs")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("tcp /v1/envs: %d, want 404 (metrics only)", resp.StatusCode)
		}
	})
	if _, err := c.StopCommand(ctx, sleeper.ID, client.StopOptions{}); err != nil {
		t.Fatal(err)
	}
}

// envsSnapshot is what `hostfork envs --all --json` says, without the
// fields a reader computes anew each time.
func envsSnapshot(t *testing.T, e *servertest.Env) string {
	t.Helper()
	out, err := e.CLI("envs", "--all", "--json")
	if err != nil {
		t.Fatalf("hostfork envs --all --json: %v\n%s", err, out)
	}
	var envs []api.Env
	if err := json.Unmarshal(out, &envs); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range envs {
		fmt.Fprintf(&b, "%s rev %d %s commands %d\n", e.ID, e.Rev, e.State, len(e.Commands))
	}
	return b.String()
}

// TestBadInput: malformed JSON, unknown fields, huge bodies, unknown ids:
// each a JSON error with the right status, and nothing half-made.
func TestBadInput(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, time.Minute)
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}})
	if err != nil {
		t.Fatal(err)
	}
	snap := envsSnapshot(t, e)
	huge := filepath.Join(e.Dir, "huge.json")
	big := append([]byte(`{"purpose":"`), bytes.Repeat([]byte("x"), 2<<20)...)
	if err := os.WriteFile(huge, append(big, `","lifetime":{"max_runtime":"5m"}}`...), 0o600); err != nil {
		t.Fatal(err)
	}
	envs := "http://localhost/v1/envs"
	cmds := envs + "/" + env.ID + "/commands"
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		cause  string
		exit   int
	}{
		{"malformed JSON", []string{"-X", "POST", envs, "-d", `{"lifetime":`}, 400, "invalid", 122},
		{"not an object", []string{"-X", "POST", envs, "-d", `[1,2]`}, 400, "invalid", 122},
		{"trailing data", []string{"-X", "POST", envs, "-d", `{"lifetime":{"max_runtime":"5m"}} {}`}, 400, "invalid", 122},
		{"empty body", []string{"-X", "POST", envs}, 400, "invalid", 122},
		{"unknown field", []string{"-X", "POST", envs, "-d", `{"lifetime":{"max_runtime":"5m"},"bogus":1}`}, 400, "invalid", 122},
		{"unknown nested field", []string{"-X", "POST", envs, "-d", `{"lifetime":{"max_runtime":"5m","forever":true}}`}, 400, "invalid", 122},
		{"bad duration", []string{"-X", "POST", envs, "-d", `{"lifetime":{"max_runtime":300}}`}, 400, "invalid", 122},
		{"huge body", []string{"-X", "POST", envs, "--data-binary", "@" + huge}, 413, "invalid", 122},
		{"no lifetime", []string{"-X", "POST", envs, "-d", `{}`}, 422, "invalid", 122},
		{"owner exit stop", []string{"-X", "POST", envs, "-d", `{"lifetime":{"max_runtime":"5m","owner_exit":"stop"}}`}, 422, "invalid", 122},
		{"bad tree kind", []string{"-X", "POST", envs, "-d", `{"lifetime":{"max_runtime":"5m"},"trees":{"t":{"kind":"zfs","source":"/tmp"}}}`}, 422, "invalid", 122},
		{"missing tree source", []string{"-X", "POST", envs, "-d", `{"lifetime":{"max_runtime":"5m"},"trees":{"t":{"kind":"copy","source":"/nonexistent/hostfork-test"}}}`}, 0, "", 0},
		{"command unknown field", []string{"-X", "POST", cmds, "-d", `{"argv":["true"],"stdout":"x"}`}, 400, "invalid", 122},
		{"command bad stdin", []string{"-X", "POST", cmds, "-d", `{"argv":["true"],"stdin":"x"}`}, 422, "invalid", 122},
		{"command size without tty", []string{"-X", "POST", cmds, "-d", `{"argv":["true"],"cols":80}`}, 422, "invalid", 122},
		{"command no argv", []string{"-X", "POST", cmds, "-d", `{"argv":[]}`}, 422, "invalid", 122},
		{"command bad env", []string{"-X", "POST", cmds, "-d", `{"argv":["true"],"env":["NOEQUALS"]}`}, 422, "invalid", 122},
		{"command admit wait", []string{"-X", "POST", cmds, "-d", `{"argv":["true"],"workload":"agent","admit":"wait"}`}, 422, "invalid", 122},
		{"command huge", []string{"-X", "POST", cmds, "--data-binary", "@" + huge}, 413, "invalid", 122},
		{"command missing program", []string{"-X", "POST", cmds, "-d", `{"argv":["/nonexistent/hostfork-test-prog"]}`}, 422, "executable_not_found", 127},
		{"unknown env", []string{envs + "/nonexistent"}, 404, "not_found", 119},
		{"unknown env stop", []string{"-X", "POST", envs + "/nonexistent/stop"}, 404, "not_found", 119},
		{"unknown env command", []string{"-X", "POST", envs + "/nonexistent/commands", "-d", `{"argv":["true"]}`}, 404, "not_found", 119},
		{"unknown command", []string{"http://localhost/v1/commands/nonexistent"}, 404, "not_found", 119},
		{"unknown command wait", []string{"http://localhost/v1/commands/nonexistent/wait"}, 404, "not_found", 119},
		{"unknown command logs", []string{"http://localhost/v1/commands/nonexistent/logs"}, 404, "not_found", 119},
		{"unknown command signal", []string{"-X", "POST", "http://localhost/v1/commands/nonexistent/signal", "-d", `{"signal":"TERM"}`}, 404, "not_found", 119},
		{"env id as command", []string{"http://localhost/v1/commands/" + env.ID}, 404, "not_found", 119},
		{"bad signal", []string{"-X", "POST", "http://localhost/v1/commands/nonexistent/signal", "-d", `{"signal":"SIGNOPE"}`}, 422, "invalid", 122},
		{"bad state filter", []string{envs + "?state=running"}, 422, "invalid", 122},
		{"bad grace", []string{"-X", "POST", envs + "/" + env.ID + "/stop?grace=soon"}, 422, "invalid", 122},
		{"relative export", []string{"-X", "POST", envs + "/" + env.ID + "/export", "-d", `{"tree":"t","destination":"rel"}`}, 422, "invalid", 122},
		{"unknown route", []string{"http://localhost/v2/envs"}, 404, "not_found", 119},
		{"wrong method", []string{"-X", "DELETE", envs}, 405, "invalid", 122},
	} {
		body, code := curl(t, s.Socket, tc.args...)
		if tc.status == 0 {
			// Refused by the library (status depends on the host), but
			// always a JSON error.
			if code < 400 {
				t.Errorf("%s: status %d: %s", tc.name, code, body)
			}
			continue
		}
		if code != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, code, tc.status, body)
			continue
		}
		errorBody(t, tc.name, body, tc.cause, tc.exit)
	}
	if after := envsSnapshot(t, e); after != snap {
		t.Fatalf("bad requests changed the store:\nbefore:\n%s\nafter:\n%s", snap, after)
	}
}

// TestShutdown: SIGTERM ends a following stream and the server, which
// removes its socket and exits 0; what it created keeps running.
func TestShutdown(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, time.Minute)
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	follow := exec.Command("curl", "-sSN", "--unix-socket", s.Socket, "http://localhost/v1/events")
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Kill(); _ = follow.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("no event on the stream")
	}
	start := time.Now()
	if err := s.Stop(t); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, s.Stderr())
	}
	for sc.Scan() {
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v with a following stream", d)
	}
	if _, err := os.Lstat(s.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after shutdown: %v", err)
	}
	out2, err := e.CLI("status", "--json", cmd.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rec api.Command
	if err := json.Unmarshal(out2, &rec); err != nil || rec.Liveness != api.Alive {
		t.Fatalf("the command after the server stopped: %s", out2)
	}
	// A second server on the socket of a running one is refused.
	e.Serve()
	if b, err := e.Command("serve").CombinedOutput(); err == nil || !bytes.Contains(b, []byte("serve")) {
		t.Fatalf("a second serve on the same socket: %v: %s", err, b)
	}
}
