package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/testutil"
	"golang.org/x/sys/unix"
)

// pty is a pseudo-terminal whose output is collected.
type pty struct {
	master, slave *os.File
	mu            sync.Mutex
	out           bytes.Buffer
	done          chan struct{}
	marks         int
}

func openPTY(t *testing.T) *pty {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		testutil.Skip(t, fmt.Sprintf("no pseudo-terminals: %v", err))
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	p := &pty{master: m, slave: s, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return // EIO once no slave is open
			}
		}
	}()
	t.Cleanup(func() { s.Close(); m.Close(); <-p.done })
	return p
}

// text is what the terminal has shown so far: everything written to it
// before the call (a process that just exited may have written its last
// line without the reader having read it yet).
func (p *pty) text() string {
	p.drain()
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.ReplaceAll(p.out.String(), "\r\n", "\n")
}

// drain writes a mark to the terminal and waits (bounded) until the
// reader has it, then takes it out again: what was written before the
// mark has been read then (a terminal keeps its output in order).
func (p *pty) drain() {
	p.mu.Lock()
	p.marks++
	mark := []byte(fmt.Sprintf("\x01hostfork-test-drain-%d\x02", p.marks))
	p.mu.Unlock()
	if _, err := p.slave.Write(mark); err != nil {
		return
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		p.mu.Lock()
		b := p.out.Bytes()
		if i := bytes.Index(b, mark); i >= 0 {
			rest := append(append([]byte{}, b[:i]...), b[i+len(mark):]...)
			p.out.Reset()
			p.out.Write(rest)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// start runs hostfork as the session leader of the terminal, with the
// terminal as stdin, stdout and stderr (as from an interactive shell).
func (p *pty) start(t *testing.T, c *hostforkCLI, args ...string) *exec.Cmd {
	t.Helper()
	cmd := c.command(args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.slave, p.slave, p.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func (p *pty) waitFor(t *testing.T, s string) {
	t.Helper()
	eventually(t, fmt.Sprintf("terminal shows %q", s), func() string {
		if !strings.Contains(p.text(), s) {
			return fmt.Sprintf("terminal: %q", p.text())
		}
		return ""
	})
}

// exitCode waits for cmd (bounded) and returns its exit status.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("hostfork did not exit")
	}
	return -1
}

// In the foreground on a terminal, run's output reaches the terminal and
// also the command's files; --output inherit hands the workload the
// terminal itself and keeps no files.
func TestRunOnTerminal(t *testing.T) {
	c := newCLI(t)
	t.Run("pipe", func(t *testing.T) {
		p := openPTY(t)
		cmd := p.start(t, c, "run", "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 4")
		if code := exitCode(t, cmd); code != 4 {
			t.Fatalf("exit %d; terminal: %q", code, p.text())
		}
		p.waitFor(t, "to-stdout\n")
		p.waitFor(t, "to-stderr\n")
		rows := c.ps(true)
		r := rows[len(rows)-1]
		if got := readFile(r.StdoutPath); got != "to-stdout\n" {
			t.Errorf("stdout file: %q", got)
		}
		if got := readFile(r.StderrPath); got != "to-stderr\n" {
			t.Errorf("stderr file: %q", got)
		}
	})
	t.Run("inherit", func(t *testing.T) {
		p := openPTY(t)
		cmd := p.start(t, c, "run", "--output", "inherit", "--", "sh", "-c", "tty; echo on-the-terminal")
		if code := exitCode(t, cmd); code != 0 {
			t.Fatalf("exit %d; terminal: %q", code, p.text())
		}
		p.waitFor(t, "on-the-terminal\n")
		if !strings.Contains(p.text(), "/dev/pts/") {
			t.Errorf("the workload's stdin is not the terminal: %q", p.text())
		}
		rows := c.ps(true)
		if r := rows[len(rows)-1]; r.StdoutPath != "" || r.StderrPath != "" {
			t.Errorf("inherit mode recorded output files: %+v", r)
		}
	})
}

// Ctrl-C on the terminal ends the foreground command with SIGINT, and run
// exits 130, in both pipe mode (hostfork forwards the signal) and inherit
// mode (the workload is the terminal's foreground job). Nothing is left.
func TestRunInterruptOnTerminal(t *testing.T) {
	c := newCLI(t)
	for _, output := range []string{"pipe", "inherit"} {
		t.Run(output, func(t *testing.T) {
			p := openPTY(t)
			cmd := p.start(t, c, "run", "--output", output, "--", "sh", "-c", "echo ready; exec sleep 300")
			p.waitFor(t, "ready\n")
			if _, err := p.master.Write([]byte{3}); err != nil { // ^C
				t.Fatal(err)
			}
			if code := exitCode(t, cmd); code != 130 {
				t.Fatalf("exit %d, want 130; terminal: %q", code, p.text())
			}
			eventually(t, "nothing left after ^C", func() string {
				if pids := c.procs(); len(pids) > 0 {
					return fmt.Sprintf("processes left: %v", pids)
				}
				return ""
			})
			rows := c.ps(true)
			r := rows[len(rows)-1]
			if r.State != "exited" || r.Signal == nil || *r.Signal != int(syscall.SIGINT) {
				t.Fatalf("record: %+v", r)
			}
		})
	}
}
