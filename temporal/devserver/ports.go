package devserver

import (
	"fmt"
	"net"
	"strconv"
)

// freePort returns a TCP port on host that nothing listens on. Like the
// Temporal CLI, it connects to the port once and closes the accepted side
// first, which leaves the port in TIME_WAIT: Linux then does not hand it out
// again for bind(:0) for a while, yet the server may still bind it (Go sets
// SO_REUSEADDR). This narrows, but cannot close, the race with other
// processes picking free ports.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("devserver: free port: %w", err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	r, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("devserver: free port: %w", err)
	}
	defer r.Close()
	c, err := l.Accept()
	if err != nil {
		return 0, fmt.Errorf("devserver: free port: %w", err)
	}
	c.Close()
	return port, nil
}

// checkPortFree reports an error if host:port cannot be listened on.
func checkPortFree(host string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}
