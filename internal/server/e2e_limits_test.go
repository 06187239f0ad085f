package server_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/server"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// holder is a python3 program run as another user: it opens N
// connections to the socket, sends one request on the first and reads its
// answer (it must end with the connection closed: a refused client keeps
// nothing open), then waits and reports how many of the others the
// server still holds open.
const holder = `
import socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
conns = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    conns.append(s)
first = conns.pop(0)
first.sendall(b"GET /v1/_ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
first.settimeout(10)
got = b""
try:
    while True:
        d = first.recv(65536)
        if not d:
            break
        got += d
    closed = "closed"
except socket.timeout:
    closed = "kept-open"
print("refused:", got.split(b"\r\n")[0].decode(), closed, flush=True)
time.sleep(1)
alive = 0
for s in conns:
    s.setblocking(False)
    try:
        d = s.recv(1)
        if d:
            alive += 1
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
print("held:", alive, flush=True)
print("ready", flush=True)
sys.stdin.read()
`

// TestOtherUserCannotExhaust (issue 39, item 4): another user who may
// connect to the socket opens far more connections than the server
// allows them and holds them: the server keeps at most
// MaxConnsPerOtherUser of them, closes a refused request's connection,
// and root's requests are still answered at once.
func TestOtherUserCannotExhaust(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testutil.Skip(t, "/usr/bin/python3 not found (Debian's python3)")
	}
	e := servertest.New(t)
	u := testutil.NewUser(t, "hfcap", testutil.UserOptions{})
	s := serveOpenToOthers(t, e)
	cmd := exec.Command("setpriv", "--reuid="+u.Name, "--regid="+u.Name, "--clear-groups", "/usr/bin/python3", "-c", holder, s.Socket, "200")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	var report []string
	for lines.Scan() && lines.Text() != "ready" {
		report = append(report, lines.Text())
	}
	if len(report) != 2 {
		t.Fatalf("the other user's client: %q", report)
	}
	if !strings.Contains(report[0], "403") || !strings.HasSuffix(report[0], "closed") {
		t.Errorf("a refused request: want a 403 and the connection closed: %s", report[0])
	}
	var held int
	if _, err := fmt.Sscan(strings.TrimPrefix(report[1], "held: "), &held); err != nil || held > server.MaxConnsPerOtherUser {
		t.Errorf("the server holds %s of the other user's connections, at most %d allowed", report[1], server.MaxConnsPerOtherUser)
	}
	// Root is answered while the other user holds what they can.
	c := newClient(t, s)
	start := time.Now()
	for i := 0; i < 20; i++ {
		if err := c.Ping(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("root's ping %d while the other user holds connections: %v", i, err)
		}
	}
	t.Logf("other user: %s; %s; root: 20 pings in %v", report[0], report[1], time.Since(start))
}
