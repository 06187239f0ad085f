package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
)

// ttyScript prints its terminal's size, then answers lines: "size" prints
// the size again, "quit" exits 7, anything else is echoed back as got:LINE.
const ttyScript = `stty size; while read l; do case "$l" in size) stty size;; quit) exit 7;; *) echo "got:$l";; esac; done`

// reader accumulates what a session reads, so a test can wait for text.
type reader struct {
	rd  io.Reader
	buf bytes.Buffer
	err error
}

// until reads until the output holds want (true), or the stream ends or
// 30 s pass (a safety bound only).
func (r *reader) until(t *testing.T, want string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p := make([]byte, 4096)
		for !strings.Contains(r.buf.String(), want) {
			n, err := r.rd.Read(p)
			r.buf.Write(p[:n])
			if err != nil {
				r.err = err
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("no %q in the output within 30s: %q", want, r.buf.String())
	}
	if !strings.Contains(r.buf.String(), want) {
		t.Fatalf("the output ended (%v) without %q: %q", r.err, want, r.buf.String())
	}
}

// TestSessionsAPI: a command with a terminal, through a real server on its
// unix socket: wait for its output, attach over the WebSocket (replay,
// typing, output to every client), input and resize without attaching; a
// frame over the limit closes only that connection; the server is killed
// while a client is attached and the session lives on, a new server's
// attach replays it; the command's exit ends the attach with its status.
func TestSessionsAPI(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, 2*time.Minute)

	env, err := c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", ttyScript}, TTY: true, Cols: 100, Rows: 30}})
	if err != nil {
		t.Fatal(err)
	}
	id := env.Commands[0].ID
	out, err := c.WaitFor(ctx, id, client.WaitOptions{For: `^30 100`, Timeout: time.Minute})
	if err != nil || out.Reason != api.OutcomeMatch || out.Match.Stream != "stdout" {
		t.Fatalf("wait for the size: %+v %v", out, err)
	}

	a, err := c.Attach(ctx, id, client.AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !a.TTY() || a.Offset() != 0 || a.ReplayEnd() < 7 {
		t.Fatalf("welcome: tty %v offset %d replay end %d", a.TTY(), a.Offset(), a.ReplayEnd())
	}
	ra := &reader{rd: a}
	ra.until(t, "30 100") // the replay
	if _, err := a.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	ra.until(t, "got:hello")

	// Input and resize without attaching reach the same terminal; the
	// attached client sees the answers.
	if err := c.Send(ctx, id, []byte("abc\n")); err != nil {
		t.Fatal(err)
	}
	ra.until(t, "got:abc")
	if err := c.Resize(ctx, id, 120, 40); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, id, []byte("size\n")); err != nil {
		t.Fatal(err)
	}
	ra.until(t, "40 120")

	// A frame over the limit closes that client's connection (1009), not
	// the session.
	u := "ws://" + client.UnixHost + "/v1/commands/" + id + "/attach?replay=0"
	hc := rawUnixClient(s.Socket)
	big, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := big.Read(ctx); err != nil { // the welcome
		t.Fatal(err)
	}
	_ = big.Write(ctx, websocket.MessageBinary, append([]byte{client.FrameData}, bytes.Repeat([]byte("x"), client.MaxInputFrame+1)...))
	for {
		if _, _, err = big.Read(ctx); err != nil {
			break
		}
	}
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("a frame over the limit: %v, want close status 1009", err)
	}
	if err := c.Send(ctx, id, []byte("still\n")); err != nil {
		t.Fatal(err)
	}
	ra.until(t, "got:still")

	// A browser can't open it: a WebSocket request with an Origin header
	// (as every browser sends) is refused before anything is attached.
	_, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: http.Header{"Origin": {"http://localhost"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a WebSocket with an Origin: %v %v", resp, err)
	}

	// Bad input: no upgrade, a bad size.
	resp, err = hc.Get("http://" + client.UnixHost + "/v1/commands/" + id + "/attach")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("attach without an upgrade: %s", resp.Status)
	}
	if err := c.Resize(ctx, id, 0, 10); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("resize to 0 columns: %v", err)
	}

	// The server dies while a client is attached: the session lives on in
	// the guardian, and a new server's attach replays what came between.
	s.Kill(t)
	if _, err := io.ReadAll(a); err == nil {
		t.Fatal("the attach outlived its server without an error")
	}
	s2 := e.Serve()
	c2 := newClient(t, s2)
	rec, err := c2.Command(ctx, id)
	if err != nil || rec.LeaderState != api.PhaseLive {
		t.Fatalf("after the server's death: %+v %v", rec, err)
	}
	b, err := c2.Attach(ctx, id, client.AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rb := &reader{rd: b}
	rb.until(t, "got:still")
	if _, err := b.Write([]byte("quit\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rb.rd); err != nil {
		t.Fatalf("the attach at the command's exit: %v", err)
	}
	if code, sig, ok := b.Exit(); !ok || code != 7 || sig != 0 {
		t.Fatalf("exit frame: %d %d %v", code, sig, ok)
	}

	// After the end: input to a finished command, and attach, are refused
	// with the cause that says so.
	if _, err := c2.Wait(ctx, id, client.WaitTree); err != nil {
		t.Fatal(err)
	}
	if err := c2.Send(ctx, id, []byte("late\n")); !errors.Is(err, api.ErrCommandFinished) {
		t.Fatalf("send to a finished command: %v", err)
	}
	if _, err := c2.Attach(ctx, id, client.AttachOptions{}); !errors.Is(err, api.ErrCommandFinished) {
		t.Fatalf("attach to a finished command: %v", err)
	}
}

// TestWaitAPI: waits for output through the server — a pattern, a stall,
// the timeout (504, timed_out), an invalid pattern — and logs?tail.
func TestWaitAPI(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	c := newClient(t, s)
	ctx := ctxFor(t, 2*time.Minute)
	env, err := c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", `echo a; echo b; sleep 2; echo "listening on :8080"; exec sleep 300`}}})
	if err != nil {
		t.Fatal(err)
	}
	id := env.Commands[0].ID
	out, err := c.WaitFor(ctx, id, client.WaitOptions{For: `listening on :(\d+)`})
	if err != nil || out.Reason != api.OutcomeMatch || out.Match.Offset != 4 || out.Match.Line != "listening on :8080" || out.Command.ID != id {
		t.Fatalf("wait for: %+v %v", out, err)
	}
	out, err = c.WaitFor(ctx, id, client.WaitOptions{Stalled: 200 * time.Millisecond})
	if err != nil || out.Reason != api.OutcomeStalled || out.QuietSince == nil {
		t.Fatalf("wait stalled: %+v %v", out, err)
	}
	_, err = c.WaitFor(ctx, id, client.WaitOptions{For: "never", Timeout: 300 * time.Millisecond})
	var ce *client.Error
	if !errors.Is(err, api.ErrTimedOut) || !errors.As(err, &ce) || ce.Status != http.StatusGatewayTimeout || ce.ExitCode != 115 {
		t.Fatalf("wait past its timeout: %v", err)
	}
	_, err = c.WaitFor(ctx, id, client.WaitOptions{For: "("})
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "not a valid regular expression") {
		t.Fatalf("an invalid pattern: %v", err)
	}
	rd, off, err := c.LogsAt(ctx, id, client.LogOptions{Tail: 2})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rd)
	rd.Close()
	if off != 2 || string(got) != "b\nlistening on :8080\n" {
		t.Fatalf("tail 2: offset %d %q", off, got)
	}
	// The CLI through the server: the same answers and exit codes.
	if got := viaHost(t, e, s, 0, "wait", "--for", "listening on", id); got != "stdout:4:listening on :8080\n" {
		t.Fatalf("wait --for through the server: %q", got)
	}
	viaHost(t, e, s, 115, "wait", "--timeout", "300ms", id)
	if got := viaHost(t, e, s, 0, "logs", "--tail", "1", "--stream", "stdout", id); got != "listening on :8080\n" {
		t.Fatalf("logs --tail through the server: %q", got)
	}
	if _, err := c.StopCommand(ctx, id, client.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	viaHost(t, e, s, 124, "wait", id)
	viaHost(t, e, s, 124, "logs", "-f", id)
	viaHost(t, e, s, 113, "wait", "--for", "never", id)
	out, err = c.WaitFor(ctx, id, client.WaitOptions{For: "never"})
	if err != nil || out.Reason != api.OutcomeEnded || !out.Command.Final() {
		t.Fatalf("wait for output after the end: %+v %v", out, err)
	}
	if err := c.Send(ctx, id, []byte("x")); !errors.Is(err, api.ErrNoSession) {
		t.Fatalf("input to a command without a session: %v", err)
	}

	// condition=leader returns at the leader's exit with its status; the
	// tree, a child left running, is still waited for by condition=tree.
	env, err = c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "5m"}},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", "sleep 300 & exit 4"}}})
	if err != nil {
		t.Fatal(err)
	}
	id = env.Commands[0].ID
	out, err = c.WaitFor(ctx, id, client.WaitOptions{Condition: client.WaitLeader})
	if err != nil || out.Reason != api.OutcomeLeader || out.Command.ExitCode == nil || *out.Command.ExitCode != 4 {
		t.Fatalf("condition=leader: %+v %v", out, err)
	}
	if _, err := c.WaitFor(ctx, id, client.WaitOptions{Condition: client.WaitTree, Timeout: 300 * time.Millisecond}); !errors.Is(err, api.ErrTimedOut) {
		t.Fatalf("condition=tree with a child left running: %v", err)
	}
	// Bad queries are refused with what to give.
	for _, tc := range []struct {
		o    client.WaitOptions
		want string
	}{
		{client.WaitOptions{Condition: "both"}, "use leader or tree"},
		{client.WaitOptions{Condition: client.WaitLeader, For: "x"}, "condition leader is for a plain wait"},
		{client.WaitOptions{Stalled: -time.Second}, "give a positive duration"},
		{client.WaitOptions{For: "x", Stream: "stdout", Since: -1}, "give a byte offset"},
	} {
		if _, err := c.WaitFor(ctx, id, tc.o); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("wait %+v: %v, want invalid with %q", tc.o, err, tc.want)
		}
	}
	if _, err := c.StopCommand(ctx, id, client.StopOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rawUnixClient is an HTTP client on the server's socket, for requests
// the Go client doesn't make (a raw WebSocket, a plain GET of attach).
func rawUnixClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
}

// viaHost runs the CLI through the server (--host) and requires exit
// status code; it returns the CLI's stdout.
func viaHost(t *testing.T, e *servertest.Env, s *servertest.Serve, code int, args ...string) string {
	t.Helper()
	out, err := e.CLI(append([]string{"--host", "unix://" + s.Socket}, args...)...)
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("hostfork %v: %v", args, err)
	}
	if got != code {
		t.Fatalf("hostfork --host %v: exit %d, want %d: %s", args, got, code, out)
	}
	return string(out)
}

// TestSessionsCLIThroughServer: the CLI's session verbs through a server
// (--host): run --detach --tty and --stdin pipe, send, resize, and an
// attach (over the WebSocket) that exits with the command's status.
func TestSessionsCLIThroughServer(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	id := strings.TrimSpace(viaHost(t, e, s, 0, "run", "--detach", "--ttl", "5m", "--tty", "--", "sh", "-c", ttyScript))
	viaHost(t, e, s, 0, "send", id, "hello\n")
	viaHost(t, e, s, 0, "wait", "--for", "got:hello", "--timeout", "1m", id)
	viaHost(t, e, s, 0, "resize", id, "90", "20")
	viaHost(t, e, s, 0, "send", id, "size\n")
	viaHost(t, e, s, 0, "wait", "--for", "^20 90", "--timeout", "1m", id)

	attach := e.Command("--host", "unix://"+s.Socket, "attach", "--no-stdin", id)
	stdout, err := attach.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	// The attach is connected once its replay is here: then the quit.
	var out bytes.Buffer
	replayed, done := make(chan struct{}), make(chan error, 1)
	go func() {
		p := make([]byte, 4096)
		seen := false
		for {
			n, rerr := stdout.Read(p)
			out.Write(p[:n])
			if !seen && strings.Contains(out.String(), "20 90") {
				seen = true
				close(replayed)
			}
			if rerr != nil {
				break
			}
		}
		done <- attach.Wait()
	}()
	select {
	case <-replayed:
	case <-time.After(60 * time.Second):
		t.Fatal("attach through the server replayed nothing within 60s")
	}
	defer func() {
		if attach.ProcessState == nil {
			_ = attach.Process.Kill()
			<-done
		}
	}()
	if out, err := e.CLI("--host", "unix://"+s.Socket, "send", id, "quit\n"); err != nil {
		st, _ := e.CLI("status", "--json", id)
		t.Fatalf("send quit: %v %s; the command: %s", err, out, st)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			st, _ := e.CLI("status", "--json", id)
			t.Fatalf("attach through the server: %v, want exit 7; output %q; the command: %s", err, out.String(), st)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("attach through the server did not end within 60s of the command's exit")
	}
	if !strings.Contains(out.String(), "got:hello") {
		t.Fatalf("attach's replay: %q", out.String())
	}
	viaHost(t, e, s, 113, "send", id, "late\n")

	// A foreground run --tty through the server: this process's input
	// typed into the terminal, its output here, its status the exit.
	fg := e.Command("--host", "unix://"+s.Socket, "run", "--ttl", "5m", "--tty", "--", "sh", "-c", `read l; echo "got:$l"; exit 5`)
	fg.Stdin = strings.NewReader("typed\n")
	fgOut, err := fg.Output()
	var fgExit *exec.ExitError
	if !errors.As(err, &fgExit) || fgExit.ExitCode() != 5 || !strings.Contains(string(fgOut), "got:typed") {
		t.Fatalf("run --tty through the server: %v, output %q", err, fgOut)
	}

	pipe := strings.TrimSpace(viaHost(t, e, s, 0, "run", "--detach", "--ttl", "5m", "--stdin", "pipe", "--", "cat"))
	viaHost(t, e, s, 0, "send", "--eof", pipe, "through the pipe\n")
	if got := viaHost(t, e, s, 0, "logs", "-f", pipe); got != "through the pipe\n" {
		t.Fatalf("logs of the piped command: %q", got)
	}
	plain := strings.TrimSpace(viaHost(t, e, s, 0, "run", "--detach", "--ttl", "5m", "--", "sleep", "60"))
	viaHost(t, e, s, 114, "resize", plain, "80", "24")
	viaHost(t, e, s, 0, "stop", plain)
}
