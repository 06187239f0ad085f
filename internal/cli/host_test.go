package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/server/servertest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// These tests run the same verbs of a real hostfork binary in-process and
// through a real 'hostfork serve' on a real unix socket (--host), and
// compare what they print and how they exit.

type hfResult struct {
	out, err string
	code     int
}

func (r hfResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err)
}

// hf runs the hostfork binary of e with args (and env, K=V, added).
func hf(t *testing.T, e *servertest.Env, env []string, args ...string) hfResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Bin, args...)
	cmd.Env = append(e.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := hfResult{out: stdout.String(), err: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("hostfork %v: %v", args, err)
	}
	return r
}

// both runs args in-process and through the server.
func both(t *testing.T, e *servertest.Env, host string, args ...string) (local, remote hfResult) {
	t.Helper()
	return hf(t, e, nil, args...), hf(t, e, nil, append([]string{"--host", host}, args...)...)
}

var (
	idRE   = regexp.MustCompile(`\b[0-9a-v]{10}\b`)
	timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)`)
)

// norm replaces ids and times, which differ between two runs.
func norm(s string) string { return timeRE.ReplaceAllString(idRE.ReplaceAllString(s, "ID"), "TIME") }

// same fails unless two results have the same exit code and, with ids and
// times replaced, the same output.
func same(t *testing.T, what string, local, remote hfResult) {
	t.Helper()
	if local.code != remote.code || norm(local.out) != norm(remote.out) || norm(local.err) != norm(remote.err) {
		t.Errorf("%s: in-process and through the server differ\nin-process: %s\nthrough the server: %s", what, local, remote)
	}
}

// shape is a JSON value's structure: its object keys and value kinds.
func shape(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, e := range x {
			m[k] = shape(e)
		}
		return m
	case []any:
		if len(x) == 0 {
			return "[]"
		}
		return []any{shape(x[0])}
	case nil:
		return "null"
	}
	return reflect.TypeOf(v).Kind().String()
}

func jsonOf(t *testing.T, what, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, s)
	}
	return v
}

// TestHostSameAsInProcess: foreground runs and execs, failures, records in
// JSON and text, logs and stops give the same output and exit codes
// through a server as in-process.
func TestHostSameAsInProcess(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	host := "unix://" + s.Socket

	for _, args := range [][]string{
		{"run", "--ttl", "1m", "--", "sh", "-c", "echo out; echo err >&2; exit 7"},
		{"run", "--ttl", "1m", "--purpose", "leftovers", "--", "sh", "-c", "sleep 30 & echo leader done"},
		{"run", "--ttl", "1m", "--", "sh", "-c", "kill -TERM $$"},
		{"run", "--ttl", "1m", "--timeout", "1s", "--", "sleep", "30"},
		{"run", "--ttl", "2s", "--", "sh", "-c", "echo started; sleep 30"},
		{"run", "--ttl", "1m", "--", "no-such-program-of-hostfork"},
		{"run", "--ttl", "1m", "--output", "files", "--", "sh", "-c", "echo to the files only"},
		{"run", "--ttl", "1m", "--stdin", "none", "--", "cat"},
		{"run", "--ttl", "1m", "--label", "k=v", "--env", "HF_X=1", "--", "sh", "-c", `echo "$HF_X"`},
		{"run", "--ttl", "0s", "--", "true"},
		{"run"},
		{"status", "zzzzzzzzzz"},
		{"logs", "zzzzzzzzzz"},
		{"stop"},
		{"exec", "zzzzzzzzzz", "--", "true"},
		{"ps", "--label", "=x"},
	} {
		local, remote := both(t, e, host, args...)
		same(t, strings.Join(args, " "), local, remote)
	}
	if local := hf(t, e, nil, "run", "--ttl", "1m", "--", "sh", "-c", "exit 7"); local.code != 7 {
		t.Fatalf("the in-process run itself: %s", local)
	}

	// An environment made through the server, used both ways.
	cr := hf(t, e, nil, "--host", host, "create", "--ttl", "5m", "--label", "suite=host", "--purpose", "compare", "--env", "SECRET=s3", "--json")
	if cr.code != 0 {
		t.Fatalf("create --json through the server: %s", cr)
	}
	env := jsonOf(t, "create", cr.out).(map[string]any)["id"].(string)
	lc := hf(t, e, nil, "create", "--ttl", "5m", "--label", "suite=local", "--purpose", "compare", "--env", "SECRET=s3", "--json")
	if !reflect.DeepEqual(shape(jsonOf(t, "create", lc.out)), shape(jsonOf(t, "create", cr.out))) {
		t.Errorf("create --json: the shapes differ\nin-process: %s\nthrough the server: %s", lc.out, cr.out)
	}
	if strings.Contains(cr.out, `"s3"`) || !strings.Contains(cr.out, `"SECRET"`) {
		t.Errorf("create --json through the server shows the secret:\n%s", cr.out)
	}
	for _, args := range [][]string{
		{"exec", env, "--", "sh", "-c", "echo in the env; echo e >&2; exit 4"},
		{"exec", env, "--timeout", "1s", "--", "sleep", "30"},
		{"exec", env, "--cwd", "/", "--label", "x=y", "--purpose", "p", "--", "pwd"},
	} {
		local, remote := both(t, e, host, args...)
		same(t, strings.Join(args, " "), local, remote)
	}
	var cmds [2]string
	for i, pre := range [][]string{nil, {"--host", host}} {
		r := hf(t, e, nil, append(pre, "exec", "--detach", env, "--", "sh", "-c", "echo one; sleep 0.3; echo two >&2; echo three")...)
		if r.code != 0 {
			t.Fatalf("exec --detach: %s", r)
		}
		cmds[i] = strings.TrimSpace(r.out)
	}
	for _, c := range cmds {
		for _, args := range [][]string{{"logs", "-f", c}, {"logs", "--stream", "stdout", "--offset", "4", c}, {"logs", "--stream", "stderr", c}} {
			local, remote := both(t, e, host, args...)
			same(t, strings.Join(args, " "), local, remote)
			if args[1] == "-f" && (local.out != "one\nthree\n" || local.err != "two\n") {
				t.Errorf("logs -f %s: %s", c, local)
			}
		}
	}
	// Byte-identical records, JSON and text.
	for _, args := range [][]string{
		{"status", "--json", env}, {"status", "--json", "--show-env", env}, {"status", env}, {"status", "--json", cmds[1]},
		{"ps", "--all", "--json"}, {"ps", "--all", "--json", "--env", env}, {"ps", "--all", "--label", "suite=host", "-q"},
		{"envs", "--all", "--json"}, {"envs", "--json", "--state", "active"}, {"envs", "-q"},
		{"events", "--json"}, {"events", "--since", "3"},
		{"plan", "--json", "--ttl", "1m", "--memory", "1G", "--allow-weaker"}, {"plan", "--ttl", "1m"},
		{"ps", "--env", cmds[0]},
	} {
		local, remote := both(t, e, host, args...)
		if local.code != remote.code || local.out != remote.out || local.err != remote.err {
			t.Errorf("%v: in-process and through the server differ\nin-process: %s\nthrough the server: %s", args, local, remote)
		}
	}
	// Baselines and retention.
	base := filepath.Join(e.Dir, "baseline")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"baseline", "ls", "--json"}, {"baseline", "ls"}, {"gc", "--dry-run", "--json"}, {"gc", "--dry-run"}, {"baseline", "rm", "nope"}} {
		local, remote := both(t, e, host, args...)
		if local.code != remote.code || local.out != remote.out || local.err != remote.err {
			t.Errorf("%v: in-process and through the server differ\nin-process: %s\nthrough the server: %s", args, local, remote)
		}
	}
	if r := hf(t, e, nil, "--host", host, "baseline", "add", "b1", base, "--json"); r.code != 0 || !strings.Contains(r.out, `"path": "`+base+`"`) {
		t.Errorf("baseline add through the server: %s", r)
	}
	for _, args := range [][]string{{"baseline", "ls", "--json"}, {"baseline", "add", "b1", base}} {
		local, remote := both(t, e, host, args...)
		if local.code != remote.code || local.out != remote.out || local.err != remote.err {
			t.Errorf("%v: in-process and through the server differ\nin-process: %s\nthrough the server: %s", args, local, remote)
		}
	}
	if r := hf(t, e, nil, "--host", host, "baseline", "rm", "b1"); r.code != 0 || r.out != "unregistered baseline b1 (files untouched)\n" {
		t.Errorf("baseline rm through the server: %s", r)
	}
	// Live measurements: the same shape.
	for _, args := range [][]string{{"capacity", "--json"}, {"usage", "--json"}, {"reap", "--json"}} {
		local, remote := both(t, e, host, args...)
		if local.code != 0 || remote.code != 0 || !reflect.DeepEqual(shape(jsonOf(t, args[0], local.out)), shape(jsonOf(t, args[0], remote.out))) {
			t.Errorf("%v: the shapes differ\nin-process: %s\nthrough the server: %s", args, local, remote)
		}
	}
	local, remote := both(t, e, host, "doctor", "--json")
	if local.code != remote.code || !reflect.DeepEqual(checkIDs(t, local.out), checkIDs(t, remote.out)) {
		t.Errorf("doctor --json: the checks differ\nin-process: %s\nthrough the server: %s", local, remote)
	}
	// The environment variable names the server as --host does.
	if l, r := hf(t, e, nil, "ps", "--all", "--json"), hf(t, e, []string{"HOSTFORK_HOST=" + host}, "ps", "--all", "--json"); l != r {
		t.Errorf("HOSTFORK_HOST: %s\nin-process: %s", r, l)
	}

	// Stops: a command, then the environment, through the server; then
	// the records again.
	local, remote = hf(t, e, nil, "stop", "--grace", "0", cmds[0]), hf(t, e, nil, "--host", host, "stop", "--grace", "0", cmds[1])
	same(t, "stop CMD", local, remote)
	local, remote = both(t, e, host, "stop", "--json", cmds[0])
	same(t, "stop --json of a stopped command", local, remote)
	r := hf(t, e, nil, "--host", host, "stop", env)
	if r.code != 0 || r.out != "stopped environment "+env+"\n" {
		t.Errorf("stop ENV through the server: %s", r)
	}
	for _, args := range [][]string{{"status", "--json", env}, {"envs", "--all", "--json"}, {"stop", "--json", env}, {"exec", env, "--", "true"}} {
		local, remote := both(t, e, host, args...)
		if local.code != remote.code || local.out != remote.out || local.err != remote.err {
			t.Errorf("%v after the stop: in-process and through the server differ\nin-process: %s\nthrough the server: %s", args, local, remote)
		}
	}
	// A run --detach: the same kind of record.
	local = hf(t, e, nil, "run", "--detach", "--ttl", "1m", "--json", "--", "sleep", "20")
	remote = hf(t, e, nil, "--host", host, "run", "--detach", "--ttl", "1m", "--json", "--", "sleep", "20")
	if local.code != 0 || remote.code != 0 || !reflect.DeepEqual(shape(jsonOf(t, "run", local.out)), shape(jsonOf(t, "run", remote.out))) {
		t.Errorf("run --detach --json: the shapes differ\nin-process: %s\nthrough the server: %s", local, remote)
	}
	if !strings.Contains(remote.out, `"auto_stop": true`) || !strings.Contains(remote.out, `"owner_exit": "detach"`) {
		t.Errorf("run --detach through the server: not an auto-stop environment:\n%s", remote.out)
	}
}

func checkIDs(t *testing.T, s string) []string {
	t.Helper()
	var r struct {
		Checks []struct {
			ID string `json:"id"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, s)
	}
	var ids []string
	for _, c := range r.Checks {
		ids = append(ids, c.ID)
	}
	sort.Strings(ids)
	return ids
}

// TestHostRefusals: verbs and flags that can't work through a server are
// refused with exit 122, naming the verb or the flag, before anything is
// made; an unreachable server is a clear error.
func TestHostRefusals(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	host := "unix://" + s.Socket
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"shell"}, "'hostfork shell' can't run through a server"},
		{[]string{"serve"}, "'hostfork serve' can't run through a server"},
		{[]string{"mcp"}, "'hostfork mcp' can't run through a server"},
		{[]string{"support", "plan"}, "'hostfork support plan' can't run through a server"},
		{[]string{"run", "--", "true"}, "run with --host needs --ttl"},
		{[]string{"run", "--ttl", "1m", "--stdin", "inherit", "--", "true"}, "--stdin inherit can't go with --host"},
		{[]string{"run", "--ttl", "1m", "--capture", "--", "true"}, "--capture can't go with --host"},
		{[]string{"run", "--ttl", "1m", "--output", "inherit", "--", "true"}, "--output inherit can't go with --host"},
		{[]string{"run", "--ttl", "1m", "--owner-exit", "stop", "--", "true"}, "--owner-exit stop can't go with --host"},
		{[]string{"run", "--ttl", "1m", "--recapture-env", "--", "true"}, "--recapture-env can't go with --host"},
		{[]string{"exec", "--output", "inherit", "abc", "--", "true"}, "--output inherit can't go with --host"},
		{[]string{"doctor", "--probe"}, "--spec and --probe can't go with --host"},
		{[]string{"--root", e.Root, "ps"}, "--root and --host"},
	} {
		r := hf(t, e, nil, append([]string{"--host", host}, c.args...)...)
		if r.code != 122 || !strings.Contains(r.err, c.want) {
			t.Errorf("%v: want exit 122 and %q: %s", c.args, c.want, r)
		}
	}
	for _, args := range [][]string{{"support"}, {"run", "--help"}, {"help", "shell"}, {"version"}} {
		if r := hf(t, e, nil, append([]string{"--host", host}, args...)...); r.code != 0 {
			t.Errorf("%v with --host (help and the local version): %s", args, r)
		}
	}
	r := hf(t, e, []string{"HOSTFORK_HOST=" + host}, "shell")
	if r.code != 122 || !strings.Contains(r.err, "HOSTFORK_HOST="+host) {
		t.Errorf("shell with HOSTFORK_HOST: %s", r)
	}
	if out := hf(t, e, nil, "--host", host, "envs", "--all", "-q"); out.code != 0 || out.out != "" {
		t.Errorf("a refused verb made something: %s", out)
	}
	r = hf(t, e, nil, "--host", "unix://"+filepath.Join(e.Dir, "nothing.sock"), "ps")
	if r.code != 125 || !strings.Contains(r.err, "is 'hostfork serve' running there?") {
		t.Errorf("an unreachable server: %s", r)
	}
	r = hf(t, e, nil, "--host", "relative.sock", "ps")
	if r.code != 122 {
		t.Errorf("a relative socket path: %s", r)
	}
}

// start starts hostfork with args and returns it with its stdout lines.
func start(t *testing.T, e *servertest.Env, args ...string) (*exec.Cmd, <-chan string, *syncBuffer) {
	t.Helper()
	cmd := e.Command(args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines, stderr
}

func expectLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	select {
	case l := <-lines:
		if l != want {
			t.Fatalf("line %q, want %q", l, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no line %q within 30s", want)
	}
}

// waitFor waits until b holds s (b is written by a process's stderr).
func waitFor(t *testing.T, b *syncBuffer, s string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(b.String(), s) {
			return
		}
	}
	t.Fatalf("no %q within 30s: %s", s, b)
}

// hostforkLines keeps hostfork's own lines of a stderr (the command's
// depend on how its signals interleave).
func hostforkLines(s string) string {
	var out []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.HasPrefix(l, "hostfork: ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func exitOf(cmd *exec.Cmd) int {
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestHostSignals: SIGINT, SIGTERM and SIGHUP to a foreground run or exec
// reach the command's leader through the server (the signal endpoint), as
// in-process; a second SIGTERM stops the tree.
func TestHostSignals(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	host := "unix://" + s.Socket
	script := `trap "echo got-int; exit 9" INT; trap "echo got-hup; exit 10" HUP; trap "echo got-term >&2" TERM; echo ready; while :; do sleep 0.05; done`
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM} {
		var results [2]hfResult
		for i, pre := range [][]string{nil, {"--host", host}} {
			cmd, lines, stderr := start(t, e, append(pre, "run", "--ttl", "1m", "--stdin", "none", "--", "sh", "-c", script)...)
			expectLine(t, lines, "ready")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if sig == syscall.SIGTERM {
				// The leader traps it and runs on; a second SIGTERM stops
				// the tree (hostfork ended it: 124).
				waitFor(t, stderr, "got-term")
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
			}
			var rest strings.Builder
			for l := range lines {
				rest.WriteString(l + "\n")
			}
			results[i] = hfResult{out: rest.String(), code: exitOf(cmd), err: hostforkLines(stderr.String())}
		}
		same(t, sig.String(), results[0], results[1])
		want := map[syscall.Signal]int{syscall.SIGINT: 9, syscall.SIGHUP: 10, syscall.SIGTERM: 124}[sig]
		if results[1].code != want {
			t.Errorf("%v through the server: %s, want exit %d", sig, results[1], want)
		}
	}
}

// TestHostServerRestart: a foreground run through a server outlives the
// server's SIGKILL: the command runs on, and the CLI waits for a restarted
// server, follows the output from where it was, and exits with the
// command's status.
func TestHostServerRestart(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	host := "unix://" + s.Socket
	gate := filepath.Join(e.Dir, "gate")
	cmd, lines, stderr := start(t, e, "--host", host, "run", "--ttl", "2m", "--env", "G="+gate, "--",
		"sh", "-c", `echo before; while [ ! -e "$G" ]; do sleep 0.05; done; echo after; exit 6`)
	expectLine(t, lines, "before")
	s.Kill(t)
	time.Sleep(500 * time.Millisecond)
	e.Serve()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	expectLine(t, lines, "after")
	for l := range lines {
		t.Errorf("more output: %q", l)
	}
	if code := exitOf(cmd); code != 6 {
		t.Fatalf("run through a restarted server: exit %d, want 6\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "reconnecting") {
		t.Errorf("no notice of the lost server:\n%s", stderr)
	}
}

// TestHostForbidden: a user the server refuses (not root, not the store's
// owner) gets exit 116 from every verb.
func TestHostForbidden(t *testing.T) {
	for _, tool := range []string{"setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Skip(t, tool+" not found")
		}
	}
	e := servertest.New(t)
	name := testutil.NewUser(t, "hfcli", testutil.UserOptions{}).Name
	// A directory the other user can reach, with the socket and a copy of
	// the binary (the test's directories are private).
	dir, err := os.MkdirTemp("", "hostfork-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostfork")
	if err := copyFile(e.Bin, bin); err != nil {
		t.Fatal(err)
	}
	s := e.Serve("--socket", filepath.Join(dir, "api.sock"))
	if err := os.Chmod(s.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ps"}, {"envs"}, {"run", "--ttl", "1m", "--", "true"}, {"create", "--ttl", "1m"}, {"pause"}, {"events"}, {"status", "abc"}, {"doctor"}} {
		cmd := exec.Command("setpriv", append([]string{"--reuid=" + name, "--regid=" + name, "--clear-groups", bin, "--host", "unix://" + s.Socket}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 116 || !bytes.Contains(out, []byte("may not use this server")) {
			t.Errorf("%v as another user: %v\n%s", args, err, out)
		}
	}
	if r := hf(t, e, nil, "envs", "--all", "-q"); r.out != "" {
		t.Errorf("the refused user made an environment: %s", r)
	}
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// TestHostEventsFollow: events --follow through a server resumes after a
// restart of the server from the last sequence it printed: nothing missed,
// nothing twice.
func TestHostEventsFollow(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	host := "unix://" + s.Socket
	if r := hf(t, e, nil, "--host", host, "run", "--ttl", "1m", "--", "true"); r.code != 0 {
		t.Fatalf("run: %s", r)
	}
	cmd, lines, stderr := start(t, e, "--host", host, "events", "--follow", "--json")
	var seqs []int64
	read := func(kind string) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("events --follow ended: %s", stderr)
				}
				var ev struct {
					Seq  int64  `json:"seq"`
					Kind string `json:"kind"`
				}
				if err := json.Unmarshal([]byte(l), &ev); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				seqs = append(seqs, ev.Seq)
				if ev.Kind == kind {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no %s event within 30s: %v\n%s", kind, seqs, stderr)
			}
		}
	}
	read("env.created")
	s.Kill(t)
	// Made while no server runs: the follow must still see it.
	if r := hf(t, e, nil, "create", "--ttl", "1m"); r.code != 0 {
		t.Fatalf("create: %s", r)
	}
	e.Serve()
	read("env.created")
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Errorf("sequences %v: a gap or a repeat", seqs)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(cmd); code != 0 {
		t.Errorf("events --follow after SIGINT: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "reconnecting") {
		t.Errorf("no notice of the lost server:\n%s", stderr)
	}
}

// TestHostRunPlansOnlyForLimits: through a server, a run whose spec asks
// for no limit goes straight to POST /v1/runs (the server plans it), and
// one with limits asks for the plan first, for the unenforced-limits
// warning. The requests are seen by a recording reverse proxy on a real
// unix socket between the CLI and the server.
func TestHostRunPlansOnlyForLimits(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve()
	var mu sync.Mutex
	var seen []string
	requests := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", s.Socket)
	}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "hostfork"
		},
		Transport:     tr,
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		if r.URL.Query().Has("show_env") {
			seen = append(seen, "show_env "+r.Method+" "+r.URL.Path)
		}
		mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	host := "unix://" + sock
	has := func(reqs []string, want string) bool {
		for _, r := range reqs {
			if r == want {
				return true
			}
		}
		return false
	}

	r := hf(t, e, nil, "--host", host, "run", "--ttl", "1m", "--", "sh", "-c", "echo through the proxy")
	reqs := requests()
	if r.code != 0 || r.out != "through the proxy\n" {
		t.Fatalf("run through the proxy: %s\nrequests: %q", r, reqs)
	}
	if has(reqs, "POST /v1/plan") || !has(reqs, "POST /v1/runs") {
		t.Errorf("a run without limits: requests %q, want POST /v1/runs and no POST /v1/plan", reqs)
	}

	r = hf(t, e, nil, "--host", host, "run", "--ttl", "1m", "--pids", "64", "--allow-weaker", "--", "true")
	reqs = requests()
	if r.code != 0 {
		t.Fatalf("run --pids through the proxy: %s\nrequests: %q", r, reqs)
	}
	if !has(reqs, "POST /v1/plan") || !has(reqs, "POST /v1/runs") {
		t.Errorf("a run with a limit: requests %q, want POST /v1/plan, then POST /v1/runs", reqs)
	}
	// The same run in-process prints the same (the warning, if any).
	same(t, "run --pids 64 --allow-weaker", hf(t, e, nil, "run", "--ttl", "1m", "--pids", "64", "--allow-weaker", "--", "true"), r)

	// Environment values come back only to a verb that shows them
	// (issue 39, item 2): not to run, create or stop.
	r = hf(t, e, nil, "--host", host, "run", "--detach", "--ttl", "1m", "--env", "TOKEN=secret", "--", "sleep", "60")
	env := strings.TrimSpace(r.out)
	hf(t, e, nil, "--host", host, "status", env)
	hf(t, e, nil, "--host", host, "stop", env)
	for _, q := range requests() {
		if strings.HasPrefix(q, "show_env ") {
			t.Errorf("asked for environment values without --show-env: %s", q)
		}
	}
	if r := hf(t, e, nil, "--host", host, "status", "--show-env", env); !strings.Contains(r.out, "secret") || !has(requests(), "show_env GET /v1/envs/"+env) {
		t.Errorf("status --show-env through the server: %s", r)
	}
}

// TestHostExportCommit: export --commit of a worktree tree through a
// server commits on the tree's branch like in-process, with and without
// --to, and the output is the same.
func TestHostExportCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testutil.Skip(t, "needs git")
	}
	e := servertest.New(t)
	s := e.Serve()
	host := "unix://" + s.Socket
	repo := filepath.Join(e.Dir, "repo")
	target := filepath.Join(e.Dir, "target")
	for _, d := range []string{repo, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "f.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	var results [2]hfResult
	for i, via := range [][]string{nil, {"--host", host}} {
		r := hf(t, e, nil, append(via, "create", "--ttl", "5m", "--tree", "p=worktree:"+repo, "--replace", target+"=p")...)
		if r.code != 0 {
			t.Fatalf("create %v: %s", via, r)
		}
		env := strings.TrimSpace(r.out)
		t.Cleanup(func() {
			hf(t, e, nil, "stop", env)
			hf(t, e, nil, "gc", "--force", env, "--delete-branches")
		})
		if r := hf(t, e, nil, "exec", env, "--cwd", target, "--", "sh", "-c", "echo agent > new.txt"); r.code != 0 {
			t.Fatalf("exec: %s", r)
		}
		results[i] = hf(t, e, nil, append(via, "export", env, "p", "--commit", "agent work")...)
		if results[i].code != 0 || !strings.Contains(results[i].out, "committed "+env+"/p on branch hostfork/"+env+"/p") {
			t.Fatalf("export --commit %v: %s", via, results[i])
		}
		if got := git("show", "hostfork/"+env+"/p:new.txt"); got != "agent" {
			t.Fatalf("%v: the branch holds new.txt %q", via, got)
		}
		// With --to too: committed (nothing new), then copied.
		dest := filepath.Join(e.Dir, "out"+fmt.Sprint(i))
		if r := hf(t, e, nil, append(via, "export", env, "p", "--commit", "again", "--to", dest)...); r.code != 0 || !strings.Contains(r.out, "exported "+env+"/p to "+dest) {
			t.Fatalf("export --commit --to %v: %s", via, r)
		}
		if b, _ := os.ReadFile(filepath.Join(dest, "new.txt")); string(b) != "agent\n" {
			t.Fatalf("%v: exported new.txt %q", via, b)
		}
	}
	// The same words, but for the commit's id.
	hash := regexp.MustCompile(`[0-9a-f]{40}`)
	a, b := results[0], results[1]
	a.out, b.out = hash.ReplaceAllString(a.out, "HASH"), hash.ReplaceAllString(b.out, "HASH")
	same(t, "export --commit", a, b)
}
