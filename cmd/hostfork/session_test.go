package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// tmuxTerm is a real terminal: a tmux server of its own (a private
// socket), whose panes run hostfork.
type tmuxTerm struct {
	t    *testing.T
	sock string
	bin  string // a directory with "hostfork" (this test binary)
	c    *hostforkCLI
}

func newTmux(t *testing.T, c *hostforkCLI) *tmuxTerm {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		testutil.Skip(t, "tmux is not installed")
	}
	bin := t.TempDir()
	if err := os.Symlink(c.exe, filepath.Join(bin, "hostfork")); err != nil {
		t.Fatal(err)
	}
	tm := &tmuxTerm{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock"), bin: bin, c: c}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.sock, "kill-server").Run() })
	return tm
}

func (tm *tmuxTerm) tmux(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// open runs hostfork ARGS in a new 80x24 window named name; the pane
// stays open after it exits and shows "rc=N".
func (tm *tmuxTerm) open(name string, args ...string) {
	tm.t.Helper()
	sh := fmt.Sprintf("HOSTFORK_ROOT=%s HOSTFORK_CGROUP_PARENT=%s %s=%s PATH=%s:$PATH hostfork %s; echo rc=$?; sleep 600",
		tm.c.root, tm.c.parent, markVar, tm.c.mark, tm.bin, strings.Join(args, " "))
	if _, err := os.Stat(tm.sock); err != nil {
		tm.tmux("-f", "/dev/null", "new-session", "-d", "-s", "t", "-n", name, "-x", "80", "-y", "24", sh)
		tm.tmux("set-option", "-g", "remain-on-exit", "on")
		return
	}
	tm.tmux("new-window", "-d", "-t", "t", "-n", name, sh)
}

func (tm *tmuxTerm) screen(name string) string { return tm.tmux("capture-pane", "-p", "-t", "t:"+name) }

func (tm *tmuxTerm) waitFor(name, s string) {
	tm.t.Helper()
	eventually(tm.t, fmt.Sprintf("window %s shows %q", name, s), func() string {
		if sc := tm.screen(name); !strings.Contains(sc, s) {
			return "screen:\n" + sc
		}
		return ""
	})
}

func (tm *tmuxTerm) keys(name string, keys ...string) {
	tm.tmux(append([]string{"send-keys", "-t", "t:" + name}, keys...)...)
}

// panePID is the PID of the process a window runs (the shell line).
func (tm *tmuxTerm) panePID(name string) int {
	pid, err := strconv.Atoi(strings.TrimSpace(tm.tmux("display-message", "-p", "-t", "t:"+name, "#{pane_pid}")))
	if err != nil {
		tm.t.Fatal(err)
	}
	return pid
}

// attachPID is the PID of the hostfork attach process under a window's
// shell.
func (tm *tmuxTerm) attachPID(name string) int {
	sh := tm.panePID(name)
	var pid int
	eventually(tm.t, "the attach process", func() string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", sh, sh))
		for _, f := range strings.Fields(string(b)) {
			p, _ := strconv.Atoi(f)
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); strings.HasPrefix(string(cmd), "hostfork\x00attach") {
				pid = p
				return ""
			}
		}
		return "no child of " + strconv.Itoa(sh) + " runs hostfork attach"
	})
	return pid
}

func (c *hostforkCLI) startTTY(argv ...string) string {
	c.t.Helper()
	r := c.mustRun(append([]string{"run", "--detach", "--ttl", "5m", "--tty", "--"}, argv...)...)
	return strings.TrimSpace(r.stdout)
}

// bash -i and python3 -i in a session, attached from a real terminal:
// the replay redraws the prompt, the terminal's size follows a resize,
// the detach keys leave the command running, output in between is
// replayed to a new attach from another process, and attach exits with
// the command's status.
func TestSessionInteractiveShells(t *testing.T) {
	c := newCLI(t)
	for _, sh := range []struct {
		name, prompt, size, exit string
		argv                     []string
	}{
		{"bash", "sess$ ", "stty size", "exit 5", []string{"env", "PS1=sess$ ", "bash", "--norc", "--noprofile", "-i"}},
		{"python", ">>> ", "import os; print(tuple(os.get_terminal_size()))", "raise SystemExit(5)", []string{"python3", "-q", "-i"}},
	} {
		t.Run(sh.name, func(t *testing.T) {
			c := c.with(t)
			tm := newTmux(t, c)
			id := c.startTTY(sh.argv...)
			eventually(t, "the prompt in the log", func() string {
				if out := c.run("logs", id).stdout; !strings.Contains(out, sh.prompt) {
					return "log: " + out
				}
				return ""
			})
			tm.open("a", "attach", id)
			tm.waitFor("a", strings.TrimSpace(sh.prompt)) // the replay
			tm.keys("a", sh.size, "Enter")
			want := map[string][2]string{"bash": {"24 80", "30 100"}, "python": {"(80, 24)", "(100, 30)"}}[sh.name]
			tm.waitFor("a", want[0])
			tm.tmux("resize-window", "-t", "t:a", "-x", "100", "-y", "30")
			tm.keys("a", "C-l")
			tm.keys("a", sh.size, "Enter")
			tm.waitFor("a", want[1])
			tm.keys("a", "C-p", "C-q")
			tm.waitFor("a", "rc=0")
			if st := c.status(id); st["commands"].([]any)[0].(map[string]any)["state"] != "alive" {
				t.Fatalf("detached, the command is not alive: %v", st)
			}
			mark := map[string]string{"bash": "echo between-$((6*7))\n", "python": "print('between-' + str(6*7))\n"}[sh.name]
			c.mustRun("send", id, mark)
			tm.open("b", "attach", id)
			tm.waitFor("b", "between-42")
			// The first attach survives its CLI's SIGKILL: the session
			// lives on and a new attach works.
			if err := syscall.Kill(tm.attachPID("b"), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			tm.waitFor("b", "rc=137")
			tm.open("c", "attach", id)
			tm.waitFor("c", "between-42")
			tm.keys("c", sh.exit, "Enter")
			tm.waitFor("c", "rc=5")
		})
	}
}

// Bad input: each gets a clear error naming the fix, its exit code, and
// nothing is made (no environment, command or intent recorded).
func TestSessionBadInput(t *testing.T) {
	c := newCLI(t)
	plain := strings.TrimSpace(c.mustRun("run", "--detach", "--ttl", "5m", "--", "sleep", "300").stdout)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"attach", plain}, 114, "start it with --tty or --stdin pipe"},
		{[]string{"send", plain, "x"}, 114, "start it with --tty or --stdin pipe"},
		{[]string{"resize", plain, "80", "24"}, 114, "start it with --tty or --stdin pipe"},
		{[]string{"attach", "--detach-keys", "ctrl-pq", plain}, 122, "give a comma-separated list such as ctrl-p,ctrl-q"},
		{[]string{"attach", "--replay", "lots", plain}, 122, "give a size such as 64KiB"},
		{[]string{"resize", plain, "0", "24"}, 122, "from 1 to 65535"},
		{[]string{"send", plain}, 122, "TEXT"},
		{[]string{"run", "--stdin", "pipe", "--", "cat"}, 122, "add --detach"},
		{[]string{"run", "--tty", "--output", "pipe", "--", "cat"}, 122, "drop --output pipe"},
	} {
		made := c.query(`select (select count(*) from envs), (select count(*) from commands), (select count(*) from intents)`)
		r := c.run(tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("hostfork %s: want exit %d with %q; %v", strings.Join(tc.args, " "), tc.code, tc.msg, r)
		}
		if now := c.query(`select (select count(*) from envs), (select count(*) from commands), (select count(*) from intents)`); now != made {
			t.Errorf("hostfork %s made something: envs|commands|intents %s, then %s", strings.Join(tc.args, " "), made, now)
		}
	}
	id := c.startTTY("sh", "-c", "exit 3")
	eventually(t, "the command's end", func() string {
		if r := c.run("send", id, "x"); r.code != 113 || !strings.Contains(r.stderr, "has finished") {
			return r.String()
		}
		return ""
	})
	if r := c.run("attach", id); r.code != 113 || !strings.Contains(r.stderr, "read its output with logs") {
		t.Errorf("attach to a finished command: %v", r)
	}
	c.mustRun("stop", plain)
}

// A foreground run --tty behaves like ssh -t: the command's terminal has
// this terminal's size and follows its changes, typed lines reach it, ^C
// interrupts it and ^Z stops a shell's job (the pty is its controlling
// terminal), and run exits with its status.
func TestSessionRunForegroundTTY(t *testing.T) {
	c := newCLI(t)
	tm := newTmux(t, c)
	tm.open("a", "run", "--tty", "--", "sh", "-c", `'stty size; while read x; do echo got-$x; [ "$x" = quit ] && exit 4; stty size; done'`)
	tm.waitFor("a", "24 80")
	tm.keys("a", "hi", "Enter")
	tm.waitFor("a", "got-hi")
	// The size is followed (SIGWINCH): asked again until the new size
	// shows, as the resize and the next keys travel separately.
	tm.tmux("resize-window", "-t", "t:a", "-x", "100", "-y", "30")
	asked := time.Time{}
	eventually(t, "the new size in the foreground terminal", func() string {
		if sc := tm.screen("a"); strings.Contains(sc, "30 100") {
			return ""
		} else if time.Since(asked) > time.Second {
			tm.keys("a", "size", "Enter")
			asked = time.Now()
			return "screen:\n" + sc
		} else {
			return "screen:\n" + sc
		}
	})
	tm.keys("a", "quit", "Enter")
	tm.waitFor("a", "rc=4")
	// exec --tty in the foreground, into an existing environment.
	env := strings.TrimSpace(c.mustRun("create", "--ttl", "5m").stdout)
	defer c.run("stop", env)
	tm.open("c", "exec", "--tty", env, "--", "sh", "-c", "'stty size; exit 2'")
	tm.waitFor("c", "24 80")
	tm.waitFor("c", "rc=2")
	tm.open("b", "run", "--tty", "--", "sh", "-c", "'echo ready; exec sleep 300'")
	tm.waitFor("b", "ready")
	tm.keys("b", "C-c")
	tm.waitFor("b", "rc=130")
	// Job control: ^Z stops the foreground job of an interactive bash,
	// whose terminal the session's is.
	tm.open("d", "run", "--tty", "--", "env", "PS1=jc$", "bash", "--norc", "--noprofile", "-i")
	tm.waitFor("d", "jc$")
	tm.keys("d", "sh -c 'echo started; exec sleep 300'", "Enter")
	tm.waitFor("d", "started")
	tm.keys("d", "C-z")
	tm.waitFor("d", "Stopped")
	tm.keys("d", "exit 6", "Enter")
	tm.waitFor("d", "There are stopped jobs")
	tm.keys("d", "exit 6", "Enter") // the second exit leaves, hanging the job up
	tm.waitFor("d", "rc=6")
}

// exec --detach --tty and --stdin pipe start sessions in an existing
// environment; a watcher (--no-stdin) sees the output and types nothing.
func TestSessionExec(t *testing.T) {
	c := newCLI(t)
	env := strings.TrimSpace(c.mustRun("create", "--ttl", "5m").stdout)
	defer c.run("stop", env)
	tty := strings.TrimSpace(c.mustRun("exec", "--detach", "--tty", env, "--", "sh", "-c", "while read l; do echo \"tty:$l\"; done").stdout)
	pipe := strings.TrimSpace(c.mustRun("exec", "--detach", "--stdin", "pipe", env, "--", "tr", "a-z", "A-Z").stdout)
	tm := newTmux(t, c)
	tm.open("w", "attach", "--no-stdin", tty)
	c.mustRun("send", tty, "one\n")
	tm.waitFor("w", "tty:one")
	tm.keys("w", "typed-by-watcher", "Enter")
	c.mustRun("send", tty, "two\n")
	tm.waitFor("w", "tty:two")
	if log := c.mustRun("logs", tty).stdout; strings.Contains(log, "typed-by-watcher") {
		t.Fatalf("a --no-stdin client's keys reached the terminal: %q", log)
	}
	c.mustRun("send", pipe, "hello\n")
	if r := c.run("resize", pipe, "80", "24"); r.code != 122 || !strings.Contains(r.stderr, "start it with --tty") {
		t.Fatalf("resize of a stdin pipe: %v", r)
	}
	c.mustRun("send", "--eof", pipe)
	eventually(t, "the pipe command's output", func() string {
		if r := c.run("logs", pipe); r.stdout != "HELLO\n" {
			return r.String()
		}
		return ""
	})
}

// Another user can't use a session: its socket is 0600 and the store's
// owner's, in the private store; and even given a way to the socket
// (the directories opened for traversal, the socket's mode widened, as a
// careless admin might), the guardian closes the connection without a
// byte of the session (SO_PEERCRED).
func TestTrustSessionSocket(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	id := c.startTTY("sh", "-c", "echo secret-output; exec sleep 300")
	eventually(t, "the output", func() string {
		if out := c.run("logs", id).stdout; !strings.Contains(out, "secret-output") {
			return out
		}
		return ""
	})
	cmdID := c.status(id)["commands"].([]any)[0].(map[string]any)["id"].(string)
	dir := c.status(cmdID)["dir"].(string)
	sock := filepath.Join(dir, "session.sock")
	var st syscall.Stat_t
	if err := syscall.Lstat(sock, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o600 || st.Uid != uint32(os.Geteuid()) || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		t.Fatalf("session socket mode %o uid %d", st.Mode, st.Uid)
	}
	probe := `import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("refused:", e.strerror); sys.exit(0)
try:
    s.sendall(b"h\x00\x00\x00\x09" + (65536).to_bytes(8, "big") + b"\x00")
    b=s.recv(4096)
except OSError as e:
    b=b""
print("got:", repr(b))`
	if out, _ := u.run(t, "/usr/bin/python3", "-c", probe, sock); !strings.HasPrefix(out, "refused:") {
		t.Fatalf("another user reached the session socket: %s", out)
	}
	// Widened by hand: the guardian's own check still refuses.
	var undo []func()
	defer func() {
		for _, f := range undo {
			f()
		}
	}()
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			mode := fi.Mode().Perm()
			if err := os.Chmod(d, mode|0o001); err != nil {
				t.Fatal(err)
			}
			undo = append(undo, func() { _ = os.Chmod(d, mode) })
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	out, _ := u.run(t, "/usr/bin/python3", "-c", probe, sock)
	if strings.Contains(out, "secret") || !strings.Contains(out, "got: b''") {
		t.Fatalf("another user's connection was served: %s", out)
	}
	c.mustRun("stop", id)
}

// attach --replay SIZE replays only the last SIZE bytes, and with
// --no-stdin and no terminal here it watches: the output streams out and
// attach exits with the command's status. send - types this process's
// stdin; send --eof TEXT writes TEXT, then closes a stdin pipe.
func TestSessionAttachReplaySend(t *testing.T) {
	c := newCLI(t)
	id := c.startTTY("sh", "-c", `stty -echo; echo first-0123456789; read x; echo "got:$x"; exit 9`)
	eventually(t, "the first line in the log", func() string {
		if out := c.run("logs", id).stdout; !strings.Contains(out, "0123456789") {
			return "log: " + out
		}
		return ""
	})
	attach := c.command("attach", "--no-stdin", "--replay", "6", id)
	stdout, err := attach.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	attach.Stderr = &stderr
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if attach.ProcessState == nil {
			_ = attach.Process.Kill()
			_ = attach.Wait()
		}
	}()
	lines := make(chan string, 1)
	var out strings.Builder
	go func() {
		p := make([]byte, 4096)
		sent := false
		for {
			n, err := stdout.Read(p)
			out.Write(p[:n])
			if !sent && strings.Contains(out.String(), "6789\r\n") {
				lines <- out.String()
				sent = true
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	var replay string
	select {
	case replay = <-lines:
	case <-time.After(60 * time.Second):
		t.Fatal("attach replayed nothing within 60s")
	}
	if replay != "6789\r\n" {
		t.Fatalf("attach --replay 6 replayed %q, want the log's last 6 bytes %q", replay, "6789\r\n")
	}
	send := c.command("send", id, "-")
	send.Stdin = strings.NewReader("typed\n")
	if b, err := send.CombinedOutput(); err != nil {
		t.Fatalf("send -: %v: %s", err, b)
	}
	for range lines {
	}
	err = attach.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 9 || out.String() != "6789\r\ngot:typed\r\n" {
		t.Fatalf("attach: %v (want exit 9), output %q, stderr %q", err, out.String(), stderr.String())
	}

	// A command hostfork stops while attached: attach exits 124, as run.
	up := c.startTTY("sh", "-c", "echo up; exec sleep 300")
	attach = c.command("attach", "--no-stdin", up)
	stdout, err = attach.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	attach.Stderr = &stderr
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	seen := make(chan struct{})
	go func() {
		p := make([]byte, 4096)
		var got strings.Builder
		for {
			n, err := stdout.Read(p)
			got.Write(p[:n])
			if strings.Contains(got.String(), "up") && seen != nil {
				close(seen)
				seen = nil
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-seen:
	case <-time.After(60 * time.Second):
		t.Fatal("attach replayed nothing within 60s")
	}
	c.mustRun("stop", up)
	err = attach.Wait()
	if !errors.As(err, &ee) || ee.ExitCode() != 124 || !strings.Contains(stderr.String(), "stop") {
		t.Fatalf("attach to a stopped command: %v (want exit 124), stderr %q", err, stderr.String())
	}

	pipe := strings.TrimSpace(c.mustRun("run", "--detach", "--ttl", "5m", "--stdin", "pipe", "--", "sh", "-c", "tr a-z A-Z; exit 6").stdout)
	send = c.command("send", pipe, "-")
	send.Stdin = strings.NewReader("from stdin\n")
	if b, err := send.CombinedOutput(); err != nil {
		t.Fatalf("send - to a pipe: %v: %s", err, b)
	}
	c.mustRun("send", "--eof", pipe, "last line\n")
	if r := c.run("wait", pipe); r.code != 6 {
		t.Fatalf("wait for the piped command: %v", r)
	}
	if log := c.mustRun("logs", pipe).stdout; log != "FROM STDIN\nLAST LINE\n" {
		t.Fatalf("the piped command's output: %q", log)
	}
}
