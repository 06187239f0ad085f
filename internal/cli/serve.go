package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/internal/server"
)

func newServeCmd(g *globals) *cobra.Command {
	var socket, metricsListen string
	c := &cobra.Command{
		Use:   "serve [--socket PATH] [--metrics-listen 127.0.0.1:PORT]",
		Short: "Serve the HTTP API on a unix socket (docs/api.md)",
		Long: `serve answers hostfork's HTTP API (docs/api.md) on a unix socket, by
default <store>/api.sock (mode 0660, owned by the store's owner). Only root
and the store's owner may use it (peer credentials); requests with an Origin
or Referer header, or another Host than localhost or unix, are refused.

Environments and commands made through it are bounded like 'run --detach'
(an expiry or until-stopped; owner exit detach): they keep running when
serve stops or crashes, and a restarted serve finds them again.

--metrics-listen also serves GET /metrics (only) over plain HTTP on a
loopback TCP address, without authentication.

Under systemd it takes the socket a .socket unit passes (socket activation,
LISTEN_FDS): 'hostfork support install' writes hostfork-serve.socket and
hostfork-serve.service for the store.

Clients: the Go package client, curl --unix-socket, and this CLI itself with
'hostfork --host unix://SOCKET VERB' (or HOSTFORK_HOST).

SIGTERM or SIGINT shut it down: it stops accepting, ends streams, and gives
in-flight requests 5s.`,
		Args: exactArgs(0, "no arguments (use --socket, --metrics-listen)"),
		RunE: func(c *cobra.Command, args []string) error {
			// First, before anything can start a process: the socket a
			// systemd .socket unit passed, if any.
			inherited, err := server.Inherited()
			if err != nil {
				return withCode(ExitUsage, err)
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
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			h, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer h.Close()
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
					return usageErr("--socket %s: systemd passed the socket %s (socket activation); drop --socket or make them the same", socket, path)
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
					return usageErr("--metrics-listen %s: %v", metricsListen, err)
				}
				defer mln.Close()
			}
			srv, err := server.New(server.Config{
				Host: h, OwnerUID: int(st.Uid), SocketPath: socket, ExitCode: ExitCodeOf,
				Version: func() any { return ReadBuildInfo() },
				Doctor:  func(ctx context.Context) (any, error) { return serveDoctor(ctx, c, g, h.Root()), nil },
				Logf:    func(format string, args ...any) { fmt.Fprintf(g.err, "hostfork serve: "+format+"\n", args...) },
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "hostfork serve: listening on unix://%s\n", socket)
			if inherited != nil {
				fmt.Fprintf(g.out, "hostfork serve: the socket came from systemd (socket activation)\n")
			}
			if mln != nil {
				fmt.Fprintf(g.out, "hostfork serve: metrics on http://%s/metrics\n", mln.Addr())
			}
			if f, ok := g.out.(*os.File); ok {
				_ = f.Sync()
			}
			return srv.Serve(ctx, ln, mln)
		},
	}
	c.Flags().StringVar(&socket, "socket", "", "unix socket path (default <store>/api.sock)")
	c.Flags().StringVar(&metricsListen, "metrics-listen", "", "also serve GET /metrics on this loopback TCP address, e.g. 127.0.0.1:9464")
	return c
}

// loopbackOnly refuses a metrics address that is not a loopback IP: the
// TCP listener has no authentication (docs/api.md, "Metrics").
func loopbackOnly(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return usageErr("--metrics-listen %q: give HOST:PORT with a loopback host, e.g. 127.0.0.1:9464", addr)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return usageErr("--metrics-listen %q: only a loopback address (127.0.0.0/8, [::1], localhost) is allowed, since metrics are served without authentication; put an authenticating proxy in front to scrape from elsewhere", addr)
	}
	return nil
}

// serveDoctor builds the doctor report as 'hostfork doctor --json' does
// without --spec (read-only: it does not probe).
func serveDoctor(ctx context.Context, c *cobra.Command, g *globals, root string) *doctor.Report {
	return doctor.Run(ctx, doctorOptions(c, g, root))
}
