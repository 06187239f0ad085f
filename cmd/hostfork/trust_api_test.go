package main

// Trust tests of the API's socket from the client's side (issue 39, item
// 2): the CLI checks who serves a socket before it sends anything.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeServer is a python3 program that listens on a unix socket as u,
// prints "ready", accepts one connection and prints how many bytes the
// client sent before closing it (or within two seconds).
const fakeServer = `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); s.listen(1)
print("ready", flush=True)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(2)
n = 0
try:
    while True:
        d = c.recv(65536)
        if not d:
            break
        n += len(d)
except socket.timeout:
    pass
print("got", n, flush=True)
`

// Another user's socket at the path root's CLI is pointed at (their
// server would read root's request, environment values included, and
// could forge the answer): the CLI refuses it with 116 before sending a
// byte, naming the user and the fix.
func TestTrustClientChecksServer(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatal("/usr/bin/python3 is needed for the fake server (Debian's python3)")
	}
	d := u.ownDir(t)
	sock := filepath.Join(d, "api.sock")
	fake := u.command("/usr/bin/python3", "-c", fakeServer, sock)
	out, err := fake.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	fake.Stderr = os.Stderr
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Process.Kill(); _ = fake.Wait() })
	lines := bufio.NewReader(out)
	if l, err := lines.ReadString('\n'); l != "ready\n" {
		t.Fatalf("fake server: %q %v", l, err)
	}
	r := c.run("--host", "unix://"+sock, "run", "--ttl", "1m", "--env", "API_TOKEN=secret", "--", "true")
	if r.code != 116 || !strings.Contains(r.stderr, "uid ") || !strings.Contains(r.stderr, "neither root nor you") || !strings.Contains(r.stderr, "nothing was sent") {
		t.Errorf("want exit 116 naming the server's user: %v", r)
	}
	done := make(chan string, 1)
	go func() { l, _ := lines.ReadString('\n'); done <- l }()
	select {
	case l := <-done:
		if l != "got 0\n" {
			t.Errorf("the other user's server received bytes from root's CLI: %q", l)
		}
	case <-time.After(20 * time.Second):
		t.Error("the fake server never reported")
	}
}

// A socket this user may not connect to is a refusal (116), not a server
// that is down (125).
func TestTrustSocketPermissionDenied(t *testing.T) {
	newCLI(t)
	u := newTrustUser(t)
	bin := hostforkForUser(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	py := exec.Command("/usr/bin/python3", "-c", "import socket,sys,os,time; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1],0o600); s.listen(1); print('ready',flush=True); time.sleep(60)", sock)
	out, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = py.Process.Kill(); _ = py.Wait() })
	if l, err := bufio.NewReader(out).ReadString('\n'); l != "ready\n" {
		t.Fatalf("root's socket: %q %v", l, err)
	}
	res, code := u.run(t, bin, "--host", "unix://"+sock, "ps")
	if code != 116 || !strings.Contains(res, "permission denied") {
		t.Errorf("want exit 116 and 'permission denied': exit %d: %s", code, res)
	}
}
