// Package servecli is the companion binary's verbs (cmd/hostfork-serve):
// 'hostfork serve' and 'hostfork mcp', kept out of the hostfork binary so
// that their dependencies don't initialise at every CLI call
// (cli.CompanionName).
package servecli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/atomicfile"
	"github.com/habemus-papadum/hostfork/internal/cli"
	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/internal/e2b"
	"github.com/habemus-papadum/hostfork/internal/server"
)

// Main runs the CLI with serve and mcp in this process.
func Main(args []string) int {
	return cli.MainWith(args, Verbs)
}

// Verbs are the companion's verbs.
var Verbs = cli.Verbs{Serve: serve, MCP: mcpVerb}

func serve(c *cobra.Command, g *cli.Globals, f *cli.ServeFlags) error {
	socket, metricsListen := f.Socket, f.MetricsListen
	// First, before anything can start a process: the socket a
	// systemd .socket unit passed, if any.
	inherited, err := server.Inherited()
	if err != nil {
		return cli.WithExitCode(cli.ExitUsage, err)
	}
	if inherited != nil {
		defer inherited.Close()
	}
	if metricsListen != "" {
		if err := loopbackOnly("--metrics-listen", metricsListen, "since metrics are served without authentication; put an authenticating proxy in front to scrape from elsewhere"); err != nil {
			return err
		}
	}
	webTLS, err := tcpTLS("--web", f.Web, "--web", f.WebTLSCert, f.WebTLSKey, "since the page travels in plain HTTP")
	if err != nil {
		return err
	}
	e2bTLS, err := tcpTLS("--e2b-listen", f.E2BListen, "--e2b", f.E2BTLSCert, f.E2BTLSKey, "since API keys and sandbox tokens would cross the network in clear")
	if err != nil {
		return err
	}
	if err := e2bFlagsOK(f); err != nil {
		return err
	}
	var e2bKeys []e2b.Key // read before the store opens: a bad file ends serve first
	if f.E2BListen != "" {
		if e2bKeys, err = e2b.LoadKeys(f.E2BKeys); err != nil {
			return err
		}
	}
	ctx, h, done, err := serving(c, g)
	if err != nil {
		return err
	}
	defer done()
	var st unix.Stat_t
	if err := unix.Stat(h.Root(), &st); err != nil {
		return fmt.Errorf("store %s: %w", h.Root(), err)
	}
	var ln net.Listener
	if inherited != nil {
		// Socket activation: the socket and its file are the
		// socket unit's (its path, mode and owner).
		path := inherited.Addr().String()
		if socket != "" && filepath.Clean(socket) != path {
			return cli.UsageError("--socket %s: systemd passed the socket %s (socket activation); drop --socket or make them the same", socket, path)
		}
		socket, ln = path, inherited
	} else {
		if socket == "" {
			socket = filepath.Join(h.Root(), "api.sock")
		}
		if abs, err := filepath.Abs(socket); err == nil {
			socket = abs
		}
		sock, err := server.Listen(server.ListenOptions{Path: socket, StoreDir: h.Root(), UID: int(st.Uid), GID: int(st.Gid)})
		if err != nil {
			return err
		}
		defer sock.Close()
		ln = sock
	}
	logf := func(format string, args ...any) { fmt.Fprintf(g.Err(), "hostfork serve: "+format+"\n", args...) }
	srv, err := server.New(server.Config{
		Host: h, OwnerUID: int(st.Uid), SocketPath: socket, ExitCode: cli.ExitCodeOf,
		Version: func() any { return cli.ReadBuildInfo() },
		Doctor:  func(ctx context.Context) (any, error) { return serveDoctor(ctx, c, g, h.Root()), nil },
		Logf:    logf,
	})
	if err != nil {
		return err
	}
	lns := server.Listeners{API: ln}
	var said []string // the fronts' URLs, said once all listen
	// tcp listens on a front's address and says its URL.
	tcp := func(flag, addr string, tc *tls.Config, what, suffix string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, cli.UsageError("%s %s: %v", flag, addr, err)
		}
		scheme := "http"
		if tc != nil {
			scheme = "https"
		}
		said = append(said, what+" on "+scheme+"://"+ln.Addr().String()+suffix)
		return ln, nil
	}
	if metricsListen != "" {
		mln, err := tcp("--metrics-listen", metricsListen, nil, "metrics", "/metrics")
		if err != nil {
			return err
		}
		defer mln.Close()
		lns.TCP = append(lns.TCP, server.Front{Name: "--metrics-listen", Listener: mln, Handler: srv.MetricsHandler()})
	}
	if f.Web != "" {
		o, err := webOptions(webTLS, h.Root())
		if err != nil {
			return err
		}
		wln, err := tcp("--web", f.Web, webTLS, "web view", "/?token="+o.Token)
		if err != nil {
			return err
		}
		defer wln.Close()
		_, o.Port, _ = net.SplitHostPort(wln.Addr().String())
		lns.TCP = append(lns.TCP, server.Front{Name: "--web", Listener: wln, Handler: srv.WebHandler(o), TLS: webTLS})
	}
	if f.E2BListen != "" {
		front, err := newE2B(h, f, e2bKeys, logf)
		if err != nil {
			return err
		}
		eln, err := tcp("--e2b-listen", f.E2BListen, e2bTLS, "E2B-compatible API", "")
		if err != nil {
			return err
		}
		defer eln.Close()
		lns.TCP = append(lns.TCP, server.Front{Name: "--e2b-listen", Listener: eln, Handler: front, TLS: e2bTLS, MaxConns: e2bMaxConns, Idle: e2bIdleTimeout, HTTP2: true})
	}
	fmt.Fprintf(g.Out(), "hostfork serve: listening on unix://%s\n", socket)
	if inherited != nil {
		fmt.Fprintf(g.Out(), "hostfork serve: the socket came from systemd (socket activation)\n")
	}
	for _, l := range said {
		fmt.Fprintf(g.Out(), "hostfork serve: %s\n", l)
	}
	if f, ok := g.Out().(*os.File); ok {
		_ = f.Sync()
	}
	return srv.Serve(ctx, lns)
}

// loopbackOnly refuses an address that is not a loopback IP (docs/api.md,
// "Metrics"; docs/web.md).
func loopbackOnly(flag, addr, why string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return cli.UsageError("%s %q: give HOST:PORT with a loopback host, e.g. 127.0.0.1:9464", flag, addr)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return cli.UsageError("%s %q: only a loopback address (127.0.0.0/8, [::1], localhost) is allowed, %s", flag, addr, why)
	}
	return nil
}

// tcpTLS checks a TCP front's flags before anything starts: TLS from a
// certificate and its key (both, or neither), and without TLS a loopback
// address only (why says what would cross the network). No address: no
// TLS flags either.
func tcpTLS(listenFlag, addr, tlsFlags, cert, key, why string) (*tls.Config, error) {
	if addr == "" {
		if cert != "" || key != "" {
			return nil, cli.UsageError("%s-tls-cert and %s-tls-key need %s HOST:PORT", tlsFlags, tlsFlags, listenFlag)
		}
		return nil, nil
	}
	if (cert == "") != (key == "") {
		return nil, cli.UsageError("give both %s-tls-cert and %s-tls-key (a certificate and its private key, PEM files), or neither", tlsFlags, tlsFlags)
	}
	if cert == "" {
		return nil, loopbackOnly(listenFlag, addr, why+"; give "+tlsFlags+"-tls-cert and "+tlsFlags+"-tls-key to serve it on another address")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, cli.UsageError("%s %q: give HOST:PORT", listenFlag, addr)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, cli.UsageError("%s-tls-cert %s, %s-tls-key %s: %v", tlsFlags, cert, tlsFlags, key, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// webOptions makes the web view's token, kept in <store>/web-token (mode
// 0600) for who lost the printed URL.
func webOptions(tc *tls.Config, root string) (server.WebOptions, error) {
	o := server.WebOptions{TLS: tc != nil}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return o, err
	}
	o.Token = hex.EncodeToString(b)
	if err := atomicfile.WriteFile(filepath.Join(root, "web-token"), []byte(o.Token+"\n"), 0o600); err != nil {
		return o, fmt.Errorf("the web view's token: %w", err)
	}
	if tc != nil && tc.Certificates[0].Leaf != nil {
		o.Names = tc.Certificates[0].Leaf.DNSNames
	}
	return o, nil
}

// serveDoctor builds the doctor report as 'hostfork doctor --json' does
// without --spec (read-only: it does not probe).
func serveDoctor(ctx context.Context, c *cobra.Command, g *cli.Globals, root string) *doctor.Report {
	return doctor.Run(ctx, cli.DoctorOptions(c, g, root))
}
