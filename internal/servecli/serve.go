// Package servecli is the companion binary's verbs (cmd/hostfork-serve):
// 'hostfork serve' and 'hostfork mcp', kept out of the hostfork binary so
// that their dependencies don't initialise at every CLI call
// (cli.CompanionName).
package servecli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

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
		if err := loopbackOnly(metricsListen); err != nil {
			return err
		}
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
	logf := func(format string, args ...any) { fmt.Fprintf(g.Err(), "hostfork serve: "+format+"\n", args...) }
	var front *e2bFront
	if f.E2BListen != "" {
		if front, err = startE2B(h, f, e2bKeys, logf); err != nil {
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
	if front != nil {
		fmt.Fprintf(g.Out(), "hostfork serve: E2B-compatible API on %s\n", front.url)
	}
	if f, ok := g.Out().(*os.File); ok {
		_ = f.Sync()
	}
	if front == nil {
		return srv.Serve(ctx, ln, mln)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e2bErr := make(chan error, 1)
	go func() {
		e2bErr <- front.serve(ctx)
		cancel() // the front failed: the unix API ends too
	}()
	err = srv.Serve(ctx, ln, mln)
	cancel()
	return errors.Join(err, <-e2bErr)
}

// loopbackOnly refuses a metrics address that is not a loopback IP: the
// TCP listener has no authentication (docs/api.md, "Metrics").
func loopbackOnly(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return cli.UsageError("--metrics-listen %q: give HOST:PORT with a loopback host, e.g. 127.0.0.1:9464", addr)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return cli.UsageError("--metrics-listen %q: only a loopback address (127.0.0.0/8, [::1], localhost) is allowed, since metrics are served without authentication; put an authenticating proxy in front to scrape from elsewhere", addr)
	}
	return nil
}

// serveDoctor builds the doctor report as 'hostfork doctor --json' does
// without --spec (read-only: it does not probe).
func serveDoctor(ctx context.Context, c *cobra.Command, g *cli.Globals, root string) *doctor.Report {
	return doctor.Run(ctx, cli.DoctorOptions(c, g, root))
}
