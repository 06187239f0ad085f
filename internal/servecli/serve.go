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
	"errors"
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
	var mln net.Listener
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
	if metricsListen != "" {
		if mln, err = net.Listen("tcp", metricsListen); err != nil {
			return cli.UsageError("--metrics-listen %s: %v", metricsListen, err)
		}
		defer mln.Close()
	}
	lns := server.Listeners{API: ln, Metrics: mln}
	if f.Web != "" {
		if lns.Web, lns.WebOptions, err = listenWeb(f.Web, webTLS, h.Root()); err != nil {
			return err
		}
		defer lns.Web.Close()
	}
	logf := func(format string, args ...any) { fmt.Fprintf(g.Err(), "hostfork serve: "+format+"\n", args...) }
	var front *e2bFront
	if f.E2BListen != "" {
		if front, err = startE2B(h, f, e2bTLS, e2bKeys, logf); err != nil {
			return err
		}
		defer front.ln.Close()
	}
	srv, err := server.New(server.Config{
		Host: h, OwnerUID: int(st.Uid), SocketPath: socket, ExitCode: cli.ExitCodeOf,
		Version: func() any { return cli.ReadBuildInfo() },
		Doctor:  func(ctx context.Context) (any, error) { return serveDoctor(ctx, c, g, h.Root()), nil },
		Logf:    logf,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Out(), "hostfork serve: listening on unix://%s\n", socket)
	if inherited != nil {
		fmt.Fprintf(g.Out(), "hostfork serve: the socket came from systemd (socket activation)\n")
	}
	if mln != nil {
		fmt.Fprintf(g.Out(), "hostfork serve: metrics on http://%s/metrics\n", mln.Addr())
	}
	if lns.Web != nil {
		scheme := "http"
		if webTLS != nil {
			scheme = "https"
		}
		fmt.Fprintf(g.Out(), "hostfork serve: web view on %s://%s/?token=%s\n", scheme, lns.Web.Addr(), lns.WebOptions.Token)
	}
	if front != nil {
		fmt.Fprintf(g.Out(), "hostfork serve: E2B-compatible API on %s\n", front.url)
	}
	if f, ok := g.Out().(*os.File); ok {
		_ = f.Sync()
	}
	if front == nil {
		return srv.Serve(ctx, lns)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e2bErr := make(chan error, 1)
	go func() {
		e2bErr <- front.serve(ctx)
		cancel() // the front failed: the unix API ends too
	}()
	err = srv.Serve(ctx, lns)
	cancel()
	return errors.Join(err, <-e2bErr)
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

// listenWeb listens for the web view and makes its token, kept in
// <store>/web-token (mode 0600) for who lost the printed URL.
func listenWeb(addr string, tc *tls.Config, root string) (net.Listener, server.WebOptions, error) {
	var o server.WebOptions
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, o, err
	}
	o.Token = hex.EncodeToString(b)
	if err := atomicfile.WriteFile(filepath.Join(root, "web-token"), []byte(o.Token+"\n"), 0o600); err != nil {
		return nil, o, fmt.Errorf("the web view's token: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, o, cli.UsageError("--web %s: %v", addr, err)
	}
	_, o.Port, _ = net.SplitHostPort(ln.Addr().String())
	if tc != nil {
		o.TLS = true
		if leaf := tc.Certificates[0].Leaf; leaf != nil {
			o.Names = leaf.DNSNames
		}
		ln = tls.NewListener(ln, tc)
	}
	return ln, o, nil
}

// serveDoctor builds the doctor report as 'hostfork doctor --json' does
// without --spec (read-only: it does not probe).
func serveDoctor(ctx context.Context, c *cobra.Command, g *cli.Globals, root string) *doctor.Report {
	return doctor.Run(ctx, cli.DoctorOptions(c, g, root))
}
