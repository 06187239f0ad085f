package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/filesystem"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process/processconnect"
	"github.com/habemus-papadum/hostfork/internal/testutil"
	"github.com/habemus-papadum/hostfork/spec"
)

// envdFixture is a real e2b.Server over a real Host on a real listener,
// with one sandbox (an environment labelled with its id) and connect-go
// clients that send its id and token.
type envdFixture struct {
	h     *hostfork.Host
	s     *Server
	srv   *httptest.Server
	id    string
	env   *hostfork.Env
	proc  processconnect.ProcessClient
	fs    filesystemconnect.FilesystemClient
	token string
}

// headers adds the sandbox's headers to every request.
type headers struct {
	id, token string
	rt        http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(hdrSandboxID, h.id)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	if h.token != "" {
		r.Header.Set(hdrAccessToken, h.token)
	}
	return h.rt.RoundTrip(r)
}

func newEnvd(t *testing.T, cfg Config, s spec.Environment) *envdFixture {
	t.Helper()
	ctx := context.Background()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: filepath.Join(t.TempDir(), "store"), CgroupParent: testutil.CgroupParent(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	cfg.Host = h
	cfg.Keys = []Key{{Name: "test", secret: []byte("0123456789abcdef-test-key")}}
	cfg.Secret = bytes.Repeat([]byte{7}, 32)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &envdFixture{h: h, s: srv, id: "sbx" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[LabelSandbox] = f.id
	if s.Lifetime.MaxRuntime == 0 {
		s.Lifetime.MaxRuntime = spec.Duration(10 * time.Minute)
	}
	s.Lifetime.OwnerExit = "detach"
	p, err := h.Plan(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	f.env, err = h.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.env.Stop(context.Background(), hostfork.StopOptions{Grace: -1}); err != nil {
			t.Errorf("cleanup: stopping %s: %v", f.env.ID(), err)
		}
	})
	f.srv = httptest.NewServer(srv)
	t.Cleanup(f.srv.Close)
	f.token = srv.Token(f.id)
	hc := f.client(f.token)
	f.proc = processconnect.NewProcessClient(hc, f.srv.URL, connect.WithProtoJSON())
	f.fs = filesystemconnect.NewFilesystemClient(hc, f.srv.URL, connect.WithProtoJSON())
	return f
}

// client is an HTTP client that sends the sandbox's id and token.
func (f *envdFixture) client(token string) *http.Client {
	return &http.Client{Transport: headers{id: f.id, token: token, rt: http.DefaultTransport}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// result is what a process stream said.
type result struct {
	pid            uint32
	stdout, stderr string
	pty            string
	end            *process.ProcessEvent_EndEvent
}

// events reads a process stream to its end.
type eventStream interface {
	Receive() bool
	Err() error
}

func collect(t *testing.T, st eventStream, msg func() *process.ProcessEvent) result {
	t.Helper()
	var r result
	for st.Receive() {
		switch e := msg().GetEvent().(type) {
		case *process.ProcessEvent_Start:
			r.pid = e.Start.GetPid()
		case *process.ProcessEvent_Data:
			r.stdout += string(e.Data.GetStdout())
			r.stderr += string(e.Data.GetStderr())
			r.pty += string(e.Data.GetPty())
		case *process.ProcessEvent_End:
			r.end = e.End
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if r.end == nil {
		t.Fatalf("the stream ended without an end event: %+v", r)
	}
	return r
}

// run runs cmd as the SDK's commands.run does (bash -l -c CMD: a login
// shell, which takes seconds on some hosts; "-c" alone with login false).
func (f *envdFixture) run(t *testing.T, ctx context.Context, login bool, cmd string) result {
	t.Helper()
	args := []string{"-c", cmd}
	if login {
		args = append([]string{"-l"}, args...)
	}
	st, err := f.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: args, Envs: map[string]string{"WHO": "e2b"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	return collect(t, st, func() *process.ProcessEvent { return st.Msg().GetEvent() })
}

// The SDK's commands.run: stdout and stderr apart, the exit code, the
// per-call variables; a failing command's code.
func TestEnvdRun(t *testing.T) {
	f := newEnvd(t, Config{}, spec.Environment{})
	ctx := ctxT(t)
	r := f.run(t, ctx, true, `echo hi; echo "to err $WHO" >&2; echo "$PWD"`)
	if r.stdout != "hi\n"+home()+"\n" || r.stderr != "to err e2b\n" {
		t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if r.end.GetExitCode() != 0 || !r.end.GetExited() || r.end.GetStatus() != "exit status 0" || r.pid == 0 {
		t.Errorf("end %+v, pid %d", r.end, r.pid)
	}
	r = f.run(t, ctx, false, "echo failing >&2; exit 3")
	if r.end.GetExitCode() != 3 || r.stderr != "failing\n" {
		t.Errorf("failing command: end %+v, stderr %q", r.end, r.stderr)
	}
	// Keepalives at the interval the SDK asks for (Keepalive-Ping-Interval,
	// seconds).
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"2.5"}}})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	st, err := f.proc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	kas := 0
	for st.Receive() {
		if st.Msg().GetEvent().GetKeepalive() != nil {
			kas++
		}
	}
	st.Close()
	if st.Err() != nil || kas == 0 {
		t.Errorf("keepalives: %d, %v", kas, st.Err())
	}
	// A descendant left running doesn't hold the end back: the leader's
	// exit ends the stream after a short drain (the safety bound here is
	// generous), with what the leader wrote.
	t0 := time.Now()
	r = f.run(t, ctx, false, "sleep 600 >/dev/null 2>&1 & echo early")
	if r.stdout != "early\n" || r.end.GetExitCode() != 0 || time.Since(t0) > 20*time.Second {
		t.Errorf("with a child left running: stdout %q, end %+v after %v", r.stdout, r.end, time.Since(t0))
	}
}

// procStart is a live process's start time (/proc/PID/stat field 22), ""
// once it is gone.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	return fields[19]
}

// A background command outlives its Start stream; Connect by pid replays
// its output and follows it; SIGKILL ends its whole tree (the leader and
// the child it left running, checked by pid and start time).
func TestEnvdBackgroundConnectKill(t *testing.T) {
	f := newEnvd(t, Config{}, spec.Environment{})
	ctx := ctxT(t)
	sctx, stop := context.WithCancel(ctx)
	st, err := f.proc.Start(sctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `sleep 600 & echo "child=$!"; wait`}},
		Tag:     ptr("bg"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	var out string
	for !strings.Contains(out, "\n") && st.Receive() {
		ev := st.Msg().GetEvent()
		if s := ev.GetStart(); s != nil {
			pid = s.GetPid()
		}
		out += string(ev.GetData().GetStdout())
	}
	stop()
	st.Close()
	child, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(out, "child=")))
	if err != nil || pid == 0 {
		t.Fatalf("pid %d, output %q", pid, out)
	}
	leaderStart, childStart := procStart(int(pid)), procStart(child)
	if leaderStart == "" || childStart == "" {
		t.Fatalf("the tree is not running after its stream closed: leader %q child %q", leaderStart, childStart)
	}
	list, err := f.proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ps := list.Msg.GetProcesses(); len(ps) != 1 || ps[0].GetPid() != pid || ps[0].GetTag() != "bg" || ps[0].GetConfig().GetCmd() != "/bin/bash" {
		t.Errorf("list: %v", ps)
	}

	cst, err := f.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cst.Close()
	if !cst.Receive() || cst.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("connect: first event %v, %v", cst.Msg(), cst.Err())
	}
	done := make(chan result, 1)
	go func() { done <- collect(t, cst, func() *process.ProcessEvent { return cst.Msg().GetEvent() }) }()
	if _, err := f.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "bg"}}, Signal: process.Signal_SIGNAL_SIGKILL,
	})); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.stdout != out || r.end.GetExited() || r.end.GetStatus() != "signal: killed" || r.end.GetExitCode() != -1 {
		t.Errorf("connect's replay %q (want %q), end %+v", r.stdout, out, r.end)
	}
	if s := procStart(int(pid)); s == leaderStart {
		t.Errorf("the leader %d still runs", pid)
	}
	if s := procStart(child); s == childStart {
		t.Errorf("the child %d still runs", child)
	}
	// Gone: not found (the SDK's kill answers false).
	_, err = f.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}, Signal: process.Signal_SIGNAL_SIGKILL,
	}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("signalling a gone process: %v, want not_found", err)
	}
}

func ptr[T any](v T) *T { return &v }

// A pty: typed input comes back through the terminal, and a resize
// reaches it (stty size).
func TestEnvdPty(t *testing.T) {
	f := newEnvd(t, Config{}, spec.Environment{})
	ctx := ctxT(t)
	st, err := f.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"--norc", "--noprofile", "-i"}, Envs: map[string]string{"TERM": "xterm", "PS1": "$ "}},
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() {
		t.Fatal(st.Err())
	}
	pid := st.Msg().GetEvent().GetStart().GetPid()
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	var screen string
	waitFor := func(want string) {
		t.Helper()
		for !strings.Contains(screen, want) {
			if !st.Receive() {
				t.Fatalf("waiting for %q: %v; the terminal showed %q", want, st.Err(), screen)
			}
			screen += string(st.Msg().GetEvent().GetData().GetPty())
		}
	}
	send := func(s string) {
		t.Helper()
		if _, err := f.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte(s)}}})); err != nil {
			t.Fatal(err)
		}
	}
	send("echo $((6*7))\n")
	waitFor("42\r\n")
	send("stty size\n")
	waitFor("24 80")
	if _, err := f.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 100, Rows: 30}}})); err != nil {
		t.Fatal(err)
	}
	send("stty size\n")
	waitFor("30 100")
	send("exit 5\n")
	for st.Receive() {
		if e := st.Msg().GetEvent().GetEnd(); e != nil {
			if e.GetExitCode() != 5 {
				t.Errorf("end %+v", e)
			}
			return
		}
	}
	t.Fatalf("no end: %v", st.Err())
}

// stdin: input goes to the command's stdin; CloseStdin ends it.
func TestEnvdStdin(t *testing.T) {
	f := newEnvd(t, Config{}, spec.Environment{})
	ctx := ctxT(t)
	st, err := f.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "tr a-z A-Z; echo done"}},
		Stdin:   ptr(true),
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() {
		t.Fatal(st.Err())
	}
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: st.Msg().GetEvent().GetStart().GetPid()}}
	if _, err := f.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("hello\n")}}})); err != nil {
		t.Fatal(err)
	}
	in := f.proc.StreamInput(ctx)
	for _, m := range []*process.StreamInputRequest{
		{Event: &process.StreamInputRequest_Start{Start: &process.StreamInputRequest_StartEvent{Process: sel}}},
		{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("streamed\n")}}}}},
	} {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.proc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	r := collect(t, st, func() *process.ProcessEvent { return st.Msg().GetEvent() })
	if r.stdout != "HELLO\nSTREAMED\ndone\n" || r.end.GetExitCode() != 0 {
		t.Errorf("stdout %q, end %+v", r.stdout, r.end)
	}
	// Without stdin (the SDK's default), input is refused clearly.
	st2, err := f.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"30"}}, Stdin: ptr(false),
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if !st2.Receive() {
		t.Fatal(st2.Err())
	}
	sel = &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: st2.Msg().GetEvent().GetStart().GetPid()}}
	_, err = f.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("x")}}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "stdin: true") {
		t.Errorf("input without stdin: %v", err)
	}
	if _, err := f.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGTERM})); err != nil {
		t.Fatal(err)
	}
}

// The request's Connect-Timeout-Ms bounds the command: it is stopped
// when the time is up.
func TestEnvdStartTimeout(t *testing.T) {
	f := newEnvd(t, Config{}, spec.Environment{})
	ctx, cancel := context.WithTimeout(ctxT(t), 1500*time.Millisecond)
	defer cancel()
	st, err := f.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"300"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() {
		t.Fatal(st.Err())
	}
	pid := int(st.Msg().GetEvent().GetStart().GetPid())
	start := procStart(pid)
	for st.Receive() {
	}
	if connect.CodeOf(st.Err()) != connect.CodeDeadlineExceeded {
		t.Errorf("stream: %v, want deadline_exceeded", st.Err())
	}
	deadline := time.Now().Add(30 * time.Second)
	for procStart(pid) == start && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if procStart(pid) == start {
		t.Fatal("the command outlived its request's timeout")
	}
	cs, _ := f.env.Commands(context.Background())
	if rec := cs[len(cs)-1].Record(); rec.StopReason != hostfork.ReasonTimeout {
		t.Errorf("stop reason %q, want timeout", rec.StopReason)
	}
}

// Bad input to the process API: a cwd that is not a directory of the
// view, no command, an unknown process.
func TestEnvdProcessBadInput(t *testing.T) {
	f := newEnvd(t, Config{}, spec.Environment{})
	ctx := ctxT(t)
	for _, cwd := range []string{"/no/such/dir", "/etc/hostname"} {
		st, err := f.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/true", Cwd: ptr(cwd)}}))
		if err == nil {
			for st.Receive() {
			}
			err = st.Err()
			st.Close()
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "cwd") {
			t.Errorf("cwd %s: %v, want invalid_argument naming the cwd", cwd, err)
		}
	}
	st, err := f.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{}}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
		st.Close()
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no cmd: %v", err)
	}
	_, err = f.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 1}}, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 1, Rows: 1}}}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("update pid 1: %v, want not_found", err)
	}
	// A bad request is invalid_argument before the process is looked for.
	pid1 := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 1}}
	_, err = f.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: pid1, Signal: process.Signal_SIGNAL_UNSPECIFIED}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "send SIGNAL_SIGKILL or SIGNAL_SIGTERM") {
		t.Errorf("an unsupported signal to pid 1: %v, want invalid_argument", err)
	}
	for _, pty := range []*process.PTY{nil, {Size: &process.PTY_Size{Cols: 70000, Rows: 1}}} {
		_, err = f.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: pid1, Pty: pty}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("update pid 1 to %v: %v, want invalid_argument", pty, err)
		}
	}
}

// post sends a raw request to the server with the sandbox's headers.
func (f *envdFixture) post(t *testing.T, token, path, ctype string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", f.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := f.client(token).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *envdFixture) get(t *testing.T, token, path string) (int, string) {
	t.Helper()
	resp, err := f.client(token).Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Files through envd: upload (octet-stream and multipart, directories
// made), download, stat, list, makeDir, move, remove, watch (stream and
// polling).
func TestEnvdFiles(t *testing.T) {
	f := newEnvd(t, Config{}, spec.Environment{})
	ctx := ctxT(t)
	dir := t.TempDir()

	wst, err := f.fs.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	defer wst.Close()
	if !wst.Receive() || wst.Msg().GetStart() == nil {
		t.Fatalf("watch: first event %v, %v", wst.Msg(), wst.Err())
	}
	wres, err := f.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: dir, Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}

	code, body := f.post(t, f.token, "/files?path="+dir+"/a/b/one.txt", "application/octet-stream", strings.NewReader("one\n"))
	if code != 200 || !strings.Contains(body, `"path":"`+dir+`/a/b/one.txt"`) || !strings.Contains(body, `"type":"file"`) {
		t.Fatalf("octet-stream upload: %d %s", code, body)
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	for name, content := range map[string]string{dir + "/two.txt": "two\n", dir + "/c/three.txt": "three\n"} {
		w, _ := mw.CreateFormFile("file", name)
		io.WriteString(w, content)
	}
	mw.Close()
	code, body = f.post(t, f.token, "/files", mw.FormDataContentType(), &mp)
	if code != 200 || !strings.Contains(body, dir+"/c/three.txt") || !strings.Contains(body, dir+"/two.txt") {
		t.Fatalf("multipart upload: %d %s", code, body)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "zipped\n")
	zw.Close()
	req, _ := http.NewRequest("POST", f.srv.URL+"/files?path="+dir+"/c/z.txt", &gz)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	if resp, err := f.client(f.token).Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("gzip upload: %v %v", resp, err)
	}
	if b, err := os.ReadFile(dir + "/c/z.txt"); err != nil || string(b) != "zipped\n" {
		t.Errorf("gzip upload wrote %q %v", b, err)
	}
	if code, body := f.post(t, f.token, "/files?path="+dir+"/c", "application/octet-stream", strings.NewReader("x")); code != 400 || !strings.Contains(body, "is a directory") {
		t.Errorf("upload onto a directory: %d %s", code, body)
	}
	req, _ = http.NewRequest("POST", f.srv.URL+"/files?path="+dir+"/meta.txt", strings.NewReader("m"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Metadata-Owner", "me")
	if resp, err := f.client(f.token).Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("upload with metadata: %v %v", resp, err)
	}
	if code, body := f.get(t, f.token, "/files?path="+dir+"/c/three.txt"); code != 200 || body != "three\n" {
		t.Errorf("download: %d %q", code, body)
	}
	if code, body := f.get(t, f.token, "/files?path="+dir+"/nothing"); code != 404 || !strings.Contains(body, `"message"`) {
		t.Errorf("download of a missing file: %d %q", code, body)
	}

	// The stream saw the new entries.
	seen := map[string]bool{}
	for !seen["two.txt"] || !seen["a"] {
		if !wst.Receive() {
			t.Fatalf("watch: %v (saw %v)", wst.Err(), seen)
		}
		if e := wst.Msg().GetFilesystem(); e != nil {
			seen[e.GetName()] = true
			if strings.Contains(e.GetName(), "hostfork-") {
				t.Errorf("a write's temporary file was reported: %v", e)
			}
		}
	}
	var polled []string
	for range 100 {
		ev, err := f.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wres.Msg.GetWatcherId()}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev.Msg.GetEvents() {
			polled = append(polled, e.GetName())
		}
		if slicesContains(polled, "a/b/one.txt") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !slicesContains(polled, "a/b/one.txt") || !slicesContains(polled, "c/three.txt") {
		t.Errorf("the polling watcher's events: %v", polled)
	}
	if _, err := f.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: wres.Msg.GetWatcherId()})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wres.Msg.GetWatcherId()})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a removed watcher: %v", err)
	}

	st, err := f.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: dir + "/a/b/one.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := st.Msg.GetEntry(); e.GetName() != "one.txt" || e.GetSize() != 4 || e.GetType() != filesystem.FileType_FILE_TYPE_FILE || e.GetMode() != 0o644 || e.GetPermissions() != "-rw-r--r--" {
		t.Errorf("stat: %v", e)
	}
	ls, err := f.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: dir, Depth: 2}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ls.Msg.GetEntries() {
		names = append(names, strings.TrimPrefix(e.GetPath(), dir+"/"))
	}
	if strings.Join(names, " ") != "a a/b c c/three.txt c/z.txt two.txt" {
		t.Errorf("list depth 2: %v", names)
	}
	if _, err := f.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: dir + "/x/y/z"})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: dir + "/x/y"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("makeDir of an existing directory: %v", err)
	}
	mv, err := f.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: dir + "/two.txt", Destination: dir + "/m/moved.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if mv.Msg.GetEntry().GetPath() != dir+"/m/moved.txt" {
		t.Errorf("move: %v", mv.Msg.GetEntry())
	}
	if b, err := os.ReadFile(dir + "/m/moved.txt"); err != nil || string(b) != "two\n" {
		t.Errorf("moved: %q %v", b, err)
	}
	if _, err := f.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: dir + "/a"})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/a"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed: %v", err)
	}
	if _, err := f.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: dir + "/a"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("removing a missing file: %v", err)
	}
	if _, err := f.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: dir + "/m/moved.txt"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("listing a file: %v", err)
	}
	// At most maxWatchers polling watchers per sandbox.
	var ws []string
	for i := 0; i < maxWatchers; i++ {
		w, err := f.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: dir}))
		if err != nil {
			t.Fatalf("watcher %d: %v", i+1, err)
		}
		ws = append(ws, w.Msg.GetWatcherId())
	}
	if _, err := f.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: dir})); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("watcher %d: %v, want resource_exhausted", maxWatchers+1, err)
	}
	for _, id := range ws {
		if _, err := f.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// In a sandbox with a view, links the workload made to what the view
// hides (the host's directory under a scratch, /etc/shadow, /etc) are
// never followed out: a read finds nothing, a write replaces the link, a
// remove or move takes the link itself.
func TestEnvdHostileSymlinks(t *testing.T) {
	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, "host-only"), []byte("HOST SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newEnvd(t, Config{}, spec.Environment{View: spec.View{Scratch: []string{target}}})
	ctx := ctxT(t)
	r := f.run(t, ctx, false, fmt.Sprintf(`cd %s && ln -s %s/host-only abs && ln -s ../../../../../..%s/host-only dots && ln -s /etc/shadow shadow && ln -s /etc etc && ls`, target, target, target))
	if r.end.GetExitCode() != 0 || strings.Contains(r.stdout, "host-only") {
		t.Fatalf("setting up the links: %+v", r)
	}
	for _, n := range []string{"abs", "dots"} {
		if code, body := f.get(t, f.token, "/files?path="+target+"/"+n); code != 404 {
			t.Errorf("read %s: %d %q, want 404", n, code, body)
		}
	}
	shadow, _ := os.ReadFile("/etc/shadow")
	if code, body := f.post(t, f.token, "/files?path="+target+"/shadow", "application/octet-stream", strings.NewReader("mine\n")); code != 200 {
		t.Fatalf("write through a link: %d %s", code, body)
	}
	if now, _ := os.ReadFile("/etc/shadow"); !bytes.Equal(now, shadow) {
		t.Fatal("/etc/shadow changed")
	}
	if _, err := f.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: target + "/etc"})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: target + "/abs", Destination: target + "/moved"})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/etc/hostname"); err != nil {
		t.Fatalf("/etc: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "host-only")); err != nil || string(b) != "HOST SECRET\n" {
		t.Fatalf("the host's hidden file: %q %v", b, err)
	}
	r = f.run(t, ctx, false, "cd "+target+" && ls && cat shadow && readlink moved")
	if r.stdout != "dots\nmoved\nshadow\nmine\n"+target+"/host-only\n" {
		t.Errorf("in the view: %q", r.stdout)
	}
}

// Authentication and bad requests: a wrong or missing token is 401 (or
// unauthenticated), a gone sandbox not found (health 502), another user
// refused, a malformed envelope and an unknown method answered in
// Connect's terms, an upload above the bound refused with nothing left.
func TestEnvdBadRequests(t *testing.T) {
	f := newEnvd(t, Config{MaxUpload: 1 << 20}, spec.Environment{})
	ctx := ctxT(t)
	dir := t.TempDir()

	if code, _ := f.get(t, f.token, "/health"); code != 204 {
		t.Errorf("health: %d", code)
	}
	for _, tok := range []string{"", "wrong", f.s.Token(f.id + "x")} {
		bad := processconnect.NewProcessClient(f.client(tok), f.srv.URL, connect.WithProtoJSON())
		if _, err := bad.List(ctx, connect.NewRequest(&process.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("token %q: list: %v, want unauthenticated", tok, err)
		}
		st, err := bad.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/true"}}))
		if err == nil {
			for st.Receive() {
				t.Errorf("token %q: start sent %v", tok, st.Msg())
			}
			err = st.Err()
		}
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("token %q: start: %v, want unauthenticated", tok, err)
		}
		if code, _ := f.get(t, tok, "/files?path=/etc/hostname"); code != 401 {
			t.Errorf("token %q: download: %d", tok, code)
		}
		if code, _ := f.get(t, tok, "/health"); code != 401 {
			t.Errorf("token %q: health: %d", tok, code)
		}
	}
	// Another user than the server's.
	req, _ := http.NewRequest("GET", f.srv.URL+"/files?path=/etc/hostname&username=nobody-else", nil)
	resp, err := f.client(f.token).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), serverUser()) {
		t.Errorf("another user: %d %s", resp.StatusCode, b)
	}
	if code, _ := f.get(t, f.token, "/files?path=/etc/hostname&username="+serverUser()); code != 200 {
		t.Errorf("the server's user: %d", code)
	}

	other := processconnect.NewProcessClient(f.client(f.token), f.srv.URL, connect.WithProtoJSON())
	lreq := connect.NewRequest(&process.ListRequest{})
	lreq.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("nobody-else:")))
	if _, err := other.List(ctx, lreq); connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), serverUser()) {
		t.Errorf("another user's RPC: %v, want permission_denied naming %s", err, serverUser())
	}
	lreq = connect.NewRequest(&process.ListRequest{})
	lreq.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(serverUser()+":")))
	if _, err := other.List(ctx, lreq); err != nil {
		t.Errorf("the server's user's RPC: %v", err)
	}

	// A malformed envelope: a length beyond the body, and garbage JSON.
	// (connect-go calls a short envelope a protocol error, "internal").
	code, body := f.post(t, f.token, "/process.Process/Start", "application/connect+json", bytes.NewReader([]byte{0, 0, 0, 1, 0, '{'}))
	if code != 200 || !strings.Contains(body, `"error":{"code":"internal","message":"protocol error: promised 256 bytes`) {
		t.Errorf("a truncated envelope: %d %q", code, body)
	}
	code, body = f.post(t, f.token, "/process.Process/Start", "application/connect+json", bytes.NewReader([]byte{0, 0, 0, 0, 1, '{'}))
	if code != 200 || !strings.Contains(body, `"error":{"code":"invalid_argument"`) {
		t.Errorf("an envelope of bad JSON: %d %q", code, body)
	}
	code, body = f.post(t, f.token, "/process.Process/List", "application/json", strings.NewReader("{not json"))
	if code != 400 || !strings.Contains(body, `"invalid_argument"`) {
		t.Errorf("malformed JSON: %d %q", code, body)
	}
	// An unknown method: Connect's unimplemented.
	nope := connect.NewClient[process.ListRequest, process.ListResponse](f.client(f.token), f.srv.URL+"/process.Process/Nope", connect.WithProtoJSON())
	if _, err := nope.CallUnary(ctx, connect.NewRequest(&process.ListRequest{})); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("unknown method: %v, want unimplemented", err)
	}
	nope = connect.NewClient[process.ListRequest, process.ListResponse](f.client(f.token), f.srv.URL+"/nosuch.Service/List", connect.WithProtoJSON())
	if _, err := nope.CallUnary(ctx, connect.NewRequest(&process.ListRequest{})); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("unknown service: %v, want unimplemented", err)
	}

	// Uploads above the bound: declared (2 GiB, refused before a byte is
	// read) and streamed without a length (refused at the bound); nothing
	// stays.
	req, _ = http.NewRequest("POST", f.srv.URL+"/files?path="+dir+"/big", io.LimitReader(zeros{}, 2<<30))
	req.ContentLength = 2 << 30
	req.Header.Set("Content-Type", "application/octet-stream")
	t0 := time.Now()
	resp, err = f.client(f.token).Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(b), "larger than") {
			t.Errorf("2 GiB upload: %d %s", resp.StatusCode, b)
		}
	}
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("refusing a 2 GiB upload took %v", d)
	}
	code, body = f.post(t, f.token, "/files?path="+dir+"/big", "application/octet-stream", io.MultiReader(io.LimitReader(zeros{}, 3<<20)))
	if code != 413 {
		t.Errorf("a 3 MiB upload without a length: %d %s", code, body)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("left behind: %v", es)
	}

	// A gone sandbox: not found, and health 502.
	if err := f.env.Stop(ctx, hostfork.StopOptions{Grace: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.proc.List(ctx, connect.NewRequest(&process.ListRequest{})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a gone sandbox: %v, want not_found", err)
	}
	if code, _ := f.get(t, f.token, "/health"); code != 502 {
		t.Errorf("health of a gone sandbox: %d", code)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A restarted server (another Host on the same store) finds a running
// command by its pid, replays its output, takes its input and stops it:
// nothing of a process lives in the server.
func TestEnvdReopen(t *testing.T) {
	f := newEnvd(t, Config{}, spec.Environment{})
	ctx := ctxT(t)
	sctx, stop := context.WithCancel(ctx)
	st, err := f.proc.Start(sctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", `echo one; read line; echo "got $line"; sleep 600`}},
		Stdin:   ptr(true),
	}))
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	var out string
	for out != "one\n" && st.Receive() {
		if s := st.Msg().GetEvent().GetStart(); s != nil {
			pid = s.GetPid()
		}
		out += string(st.Msg().GetEvent().GetData().GetStdout())
	}
	stop()
	st.Close()
	f.srv.Close()

	h2, err := hostfork.Open(ctx, hostfork.Options{Root: f.h.Root(), CgroupParent: testutil.CgroupParent(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	cfg := f.s.cfg
	cfg.Host = h2
	s2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(s2)
	defer srv2.Close()
	proc := processconnect.NewProcessClient(f.client(f.token), srv2.URL, connect.WithProtoJSON())
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	cst, err := proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatal(err)
	}
	defer cst.Close()
	if _, err := proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("two\n")}}})); err != nil {
		t.Fatal(err)
	}
	out = ""
	for !strings.Contains(out, "got two\n") && cst.Receive() {
		out += string(cst.Msg().GetEvent().GetData().GetStdout())
	}
	if out != "one\ngot two\n" {
		t.Errorf("after the restart: %q (%v)", out, cst.Err())
	}
	if _, err := proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	r := collect(t, cst, func() *process.ProcessEvent { return cst.Msg().GetEvent() })
	if r.end.GetStatus() != "signal: killed" {
		t.Errorf("end %+v", r.end)
	}
}
