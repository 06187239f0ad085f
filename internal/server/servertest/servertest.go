// Package servertest runs a real `hostfork serve` (or `hostfork mcp`) for
// tests: it builds the hostfork binary, gives each test its own store and
// cgroup parent, starts the server as a subprocess and waits for the line
// that says it listens, and stops exactly what it started at cleanup (also
// when the test fails). Only _test.go files import it.
package servertest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// moduleRoot is the directory holding go.mod above the working directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's working directory")
		}
		dir = parent
	}
}

// Binary builds cmd/hostfork and its companion cmd/hostfork-serve (which
// 'hostfork serve' and 'hostfork mcp' execute) into a temporary directory
// of the test and returns the path of hostfork.
func Binary(t testing.TB) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(goTool, "build", "-o", dir+"/", "./cmd/hostfork", "./cmd/hostfork-serve")
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/hostfork ./cmd/hostfork-serve: %v\n%s", err, b)
	}
	return filepath.Join(dir, "hostfork")
}

// Env is one test's hostfork: a binary, a store and a cgroup parent.
type Env struct {
	T      testing.TB
	Bin    string
	Root   string
	Parent string
	Dir    string // a private temporary directory of the test
}

// New builds hostfork and makes a store and a cgroup parent for the test.
// It needs root (skipping otherwise, failing under HOSTFORK_TEST_STRICT=1).
// At cleanup every environment still active in the store is stopped, then
// the cgroup parent is killed and removed.
func New(t testing.TB) *Env {
	t.Helper()
	testutil.RequireRoot(t)
	parent := testutil.CgroupParent(t) // registered first: removed last
	dir := t.TempDir()
	e := &Env{T: t, Bin: Binary(t), Root: filepath.Join(dir, "store"), Parent: parent, Dir: dir}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(e.Root, "registry.sqlite")); err != nil {
			return
		}
		if out, err := e.CLI("stop", "--all", "--grace", "1s"); err != nil {
			t.Logf("cleanup: hostfork stop --all: %v\n%s", err, out)
		}
	})
	return e
}

// Environ is the environment of hostfork processes of this test.
func (e *Env) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HOSTFORK_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOSTFORK_ROOT="+e.Root, "HOSTFORK_CGROUP_PARENT="+e.Parent)
}

// CLI runs the hostfork CLI on the test's store and returns its stdout.
func (e *Env) CLI(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Bin, args...)
	cmd.Env = e.Environ()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), err
	}
	return out, nil
}

// Command is a hostfork process of the test (prepared, not started).
func (e *Env) Command(args ...string) *exec.Cmd {
	cmd := exec.Command(e.Bin, args...)
	cmd.Env = e.Environ()
	return cmd
}

// Serve is a running `hostfork serve`.
type Serve struct {
	Cmd    *exec.Cmd
	Socket string
	// Metrics is the metrics listener's address, when --metrics-listen
	// was given.
	Metrics string
	// Web is the web view's URL with its token, when --web was given.
	Web string
	// E2B is the E2B-compatible front's URL (http://HOST:PORT), when
	// --e2b-listen was given.
	E2B     string
	stderr  *lockedBuffer
	done    chan struct{}
	waitErr error
}

// Serve starts `hostfork serve ARGS...` and waits until it says it listens.
// Cleanup sends SIGTERM and waits (SIGKILL after 10 s), by PID.
func (e *Env) Serve(args ...string) *Serve {
	t := e.T
	t.Helper()
	cmd := e.Command(append([]string{"serve"}, args...)...)
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &Serve{Cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w, s.stderr
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		t.Fatalf("starting hostfork serve: %v", err)
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.Stop(t) })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out)
		out.Close()
	}()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				<-s.done
				t.Fatalf("hostfork serve ended before listening: %v\n%s", s.waitErr, s.stderr)
			}
			if rest, ok := strings.CutPrefix(l, "hostfork serve: listening on unix://"); ok {
				s.Socket = rest
			}
			if rest, ok := strings.CutPrefix(l, "hostfork serve: metrics on http://"); ok {
				s.Metrics = strings.TrimSuffix(rest, "/metrics")
			}
			if rest, ok := strings.CutPrefix(l, "hostfork serve: web view on "); ok {
				s.Web = rest
			}
			if rest, ok := strings.CutPrefix(l, "hostfork serve: E2B-compatible API on "); ok {
				s.E2B = rest
			}
			if s.Socket != "" && (s.Metrics != "" || !contains(args, "--metrics-listen")) && (s.Web != "" || !contains(args, "--web")) && (s.E2B != "" || !contains(args, "--e2b-listen")) {
				go drain(lines)
				return s
			}
		case <-timeout:
			t.Fatalf("hostfork serve did not listen within 60s\n%s", s.stderr)
		}
	}
}

func contains(args []string, a string) bool {
	return slices.ContainsFunc(args, func(x string) bool { return x == a || strings.HasPrefix(x, a+"=") })
}

func drain(lines <-chan string) {
	for range lines {
	}
}

// Stderr is what the server wrote on stderr so far.
func (s *Serve) Stderr() string { return s.stderr.String() }

// Kill SIGKILLs the server and waits for it.
func (s *Serve) Kill(t testing.TB) {
	_ = s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Stop sends SIGTERM and waits; SIGKILL if it is still there after 10 s.
// It returns the process's exit error.
func (s *Serve) Stop(t testing.TB) error {
	select {
	case <-s.done:
		return s.waitErr
	default:
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Errorf("hostfork serve (pid %d) did not stop within 10s of SIGTERM; killing it", s.Cmd.Process.Pid)
		_ = s.Cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
	return s.waitErr
}

// lockedBuffer is a bytes.Buffer safe for one writer and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
