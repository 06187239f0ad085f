package hostfork_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// childVar selects a helper mode of this test binary: a workload started
// inside an environment (for programs the host may lack, such as a
// Unix-socket client), or a second orchestrator process that a test
// SIGKILLs. It is checked in init, before TestMain, and removed from the
// environment at once so that nothing the child starts inherits it. The
// guardian and the keeper never see it: they are C and dispatched before
// the Go runtime starts.
const childVar = "HOSTFORK_TEST_CHILD"

// childArgs carries a child orchestrator's instructions (JSON).
const childArgs = "HOSTFORK_TEST_CHILD_ARGS"

func init() {
	mode := os.Getenv(childVar)
	if mode == "" {
		return
	}
	os.Unsetenv(childVar)
	var code int
	switch mode {
	case "unix-client":
		code = unixClient(os.Args[1:])
	case "orchestrator":
		code = orchestrator()
	case "extender":
		code = extender()
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", childVar, mode)
		code = 2
	}
	os.Exit(code)
}

// unixClient connects to the Unix socket args[0], sends "ping", and prints
// the server's one-line answer.
func unixClient(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: unix-client SOCKET")
		return 2
	}
	c, err := net.DialTimeout("unix", args[0], 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, "ping"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(line)
	return 0
}

// serveUnix listens on the Unix socket path and answers each connection's
// first line with "pong:" and that line. It stops at cleanup.
func serveUnix(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				fmt.Fprintf(c, "pong:%s", line)
			}
			c.Close()
		}
	}()
}

// orchestration is what a child orchestrator does: open the store, create
// an environment from Spec, then start Commands in it, reporting each step
// on stdout as one line: "env ID", "cmd ID", and with Loop "done ID" once a
// command's tree exit is recorded. Without Loop it starts the commands one
// after the other and then blocks until its stdin closes (the test ended)
// or it is killed; with Loop it runs them, each to its recorded tree exit,
// over and over until it is killed.
type orchestration struct {
	Root, CgroupParent string
	Spec               spec.Environment
	Commands           [][]string
	Cwd                string
	OwnerExit          string
	Loop               bool
}

func orchestrator() int {
	var o orchestration
	if err := json.Unmarshal([]byte(os.Getenv(childArgs)), &o); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		return 2
	}
	os.Unsetenv(childArgs)
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		return 1
	}
	ctx := context.Background()
	h, err := hostfork.Open(ctx, hostfork.Options{Root: o.Root, CgroupParent: o.CgroupParent})
	if err != nil {
		return fail(err)
	}
	p, err := h.Plan(ctx, o.Spec)
	if err != nil {
		return fail(err)
	}
	env, err := h.Create(ctx, p)
	if err != nil {
		return fail(err)
	}
	fmt.Printf("env %s\n", env.ID())
	for {
		for _, argv := range o.Commands {
			cmd := env.Command(argv...)
			cmd.Cwd, cmd.OwnerExit = o.Cwd, o.OwnerExit
			if err := cmd.Start(ctx); err != nil {
				return fail(err)
			}
			fmt.Printf("cmd %s\n", cmd.ID())
			if !o.Loop {
				continue
			}
			if _, err := cmd.WaitTree(ctx); err != nil {
				return fail(err)
			}
			fmt.Printf("done %s\n", cmd.ID())
		}
		if !o.Loop {
			break
		}
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// child is a running child orchestrator.
type child struct {
	cmd   *exec.Cmd
	lines chan string // its stdout, line by line; closed at EOF
	stdin io.WriteCloser
}

// startOrchestrator starts this test binary as a child orchestrator. At
// cleanup, also on failure, it is SIGKILLed (by its PID, which this process
// holds as its parent) and reaped.
func startOrchestrator(t *testing.T, o orchestration) *child {
	t.Helper()
	return startChild(t, "orchestrator", o)
}

// startChild starts this test binary in helper mode with args (JSON) as
// its instructions; it is SIGKILLed and reaped at cleanup.
func startChild(t *testing.T, mode string, o any) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: exec.Command(exe), lines: make(chan string, 1000)}
	c.cmd.Env = append(os.Environ(), childVar+"="+mode, childArgs+"="+string(b))
	c.cmd.Stderr = &testWriter{t: t, prefix: mode + ": "}
	// Its helpers (keeper, guardians) may hold its stderr: don't wait for
	// them after it is killed.
	c.cmd.WaitDelay = 2 * time.Second
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(c.kill)
	return c
}

// next returns the child's next line, which must start with prefix+" ",
// without the prefix.
func (c *child) next(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("the orchestrator ended before printing %q", prefix)
		}
		rest, found := strings.CutPrefix(l, prefix+" ")
		if !found {
			t.Fatalf("the orchestrator printed %q, want %q ...", l, prefix)
		}
		return rest
	case <-time.After(60 * time.Second):
		t.Fatalf("the orchestrator printed no %q within 60s", prefix)
	}
	return ""
}

// kill SIGKILLs the child and reaps it; a second call does nothing.
func (c *child) kill() {
	if c.cmd.Process == nil || c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
	c.stdin.Close()
}

// testWriter logs what a child writes.
type testWriter struct {
	t      *testing.T
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(p), nil
}
