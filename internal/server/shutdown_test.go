package server_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/server"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
)

// TestShutdownStopsEveryFront: at SIGTERM every front stops accepting at
// once. A request still running on the socket (its body not all sent)
// holds the socket's drain for the grace, but not the TCP fronts (here
// the metrics listener): they do not take new requests meanwhile.
func TestShutdownStopsEveryFront(t *testing.T) {
	e := servertest.New(t)
	s := e.Serve("--metrics-listen", "127.0.0.1:0")
	hc := &http.Client{Timeout: 5 * time.Second}
	scrape := func() error {
		resp, err := hc.Get("http://" + s.Metrics + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := scrape(); err != nil {
		t.Fatal(err)
	}
	// A request in its handler: the server asks for the body (100
	// Continue) once decode reads it; one byte of it is sent, then none.
	conn, err := net.Dial("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprint(conn, "POST /v1/plan HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("the held request: %q %v, want 100 Continue", line, err)
	}
	if _, err := conn.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Well before the grace ends (the socket's drain waits for it), the
	// metrics listener is closed.
	bound := server.ShutdownGrace / 2
	for scrape() == nil {
		if time.Since(start) > bound {
			t.Fatalf("the metrics listener still answers %v after SIGTERM, while a request holds the socket's drain", bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn.Close()
	if err := s.Stop(t); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, s.Stderr())
	}
}
