package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// CompanionName is the binary that carries 'hostfork serve' and 'hostfork
// mcp' (cmd/hostfork-serve). Their dependencies (the HTTP server, the
// Prometheus client, the MCP SDK) initialise at every start of the binary
// that links them, about 2 ms and a third more binary to map: every CLI
// call would pay it, so hostfork links none of them and executes the
// companion for those two verbs (docs/decisions.md, entry 50).
const CompanionName = "hostfork-serve"

// companionBuildEnv carries the caller's build to the companion, which
// warns when it was built from something else.
const companionBuildEnv = "HOSTFORK_CALLER_BUILD"

// Globals are the CLI's global flags and streams, for the companion's
// verbs.
type Globals = globals

// Open opens the store the flags name.
func (g *Globals) Open(ctx context.Context) (*hostfork.Host, error) { return g.open(ctx) }

// Out and Err are the CLI's standard output and error.
func (g *Globals) Out() io.Writer { return g.out }
func (g *Globals) Err() io.Writer { return g.err }

// Verbs are the implementations of the verbs the companion carries. A nil
// field makes the verb execute the companion.
type Verbs struct {
	Serve func(c *cobra.Command, g *Globals, f *ServeFlags) error
	MCP   func(c *cobra.Command, g *Globals) error
}

// ServeFlags are the flags of 'hostfork serve'.
type ServeFlags struct {
	Socket        string
	MetricsListen string
	// Web is the web view's TCP address (docs/web.md); WebTLSCert and
	// WebTLSKey serve it over TLS, on any address.
	Web, WebTLSCert, WebTLSKey string
	// The E2B-compatible front (docs/e2b.md): its TCP address, API keys
	// file, templates directory, and TLS certificate and key.
	E2BListen, E2BKeys, E2BTemplates, E2BTLSCert, E2BTLSKey string
	// E2BMaxUpload bounds one upload to a sandbox (a size: 512M, 4G).
	E2BMaxUpload string
}

// UsageError is a usage error (exit 122) with a message that names the
// fix.
func UsageError(format string, args ...any) error { return usageErr(format, args...) }

// WithExitCode attaches an explicit exit code to err.
func WithExitCode(code int, err error) error { return withCode(code, err) }

// DoctorOptions are the options of a doctor report on store root, as
// 'hostfork doctor' builds them.
func DoctorOptions(c *cobra.Command, g *Globals, root string) doctor.Options {
	return doctorOptions(c, g, root)
}

// MainWith runs the CLI with the verbs v implements (the companion's
// main) and returns the process exit status.
func MainWith(args []string, v Verbs) int {
	if want := os.Getenv(companionBuildEnv); want != "" {
		os.Unsetenv(companionBuildEnv)
		if have := buildLine(ReadBuildInfo()); have != want {
			fmt.Fprintf(os.Stderr, "hostfork: warning: %s was built from %s, the hostfork that ran it from %s: rebuild both from one tree ('scripts/build.sh DIR')\n", CompanionName, have, want)
		}
	}
	return run(args, v)
}

func buildLine(b BuildInfo) string {
	dirty := "unknown"
	if b.Dirty != nil {
		dirty = strconv.FormatBool(*b.Dirty)
	}
	return b.Version + " commit " + b.Commit + " dirty " + dirty + " " + b.GoVersion
}

// companionNote ends the help of the verbs the companion carries.
const companionNote = `

The server is the companion binary ` + CompanionName + ` (cmd/hostfork-serve),
which hostfork executes in its place (same process): it must lie beside
the hostfork executable or on PATH.`

func newServeCmd(g *globals, run func(c *cobra.Command, g *Globals, f *ServeFlags) error) *cobra.Command {
	f := &ServeFlags{}
	c := &cobra.Command{
		Use:   "serve [--socket PATH] [--metrics-listen 127.0.0.1:PORT] [--web 127.0.0.1:PORT] [--e2b-listen HOST:PORT --e2b-keys FILE]",
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

--web serves a live web view of the node (docs/web.md) on a loopback TCP
address; with --web-tls-cert and --web-tls-key, over TLS on any address.
It makes a random token at start, keeps it in <store>/web-token (mode 0600)
and prints the page's URL with it; requests without it get 401, requests
from another origin or for another Host 403. The page reads, and stops.

--e2b-listen also answers E2B's SDKs (an E2B-compatible API, docs/e2b.md)
on a TCP address: the control plane and every sandbox's envd, one
listener. Callers authenticate with a key of --e2b-keys (a 0600 file of
'NAME KEY' lines). Sandboxes come from the built-in template "base" and
the spec files NAME.yaml of --e2b-templates. A non-loopback address needs
--e2b-tls-cert and --e2b-tls-key. A sandbox shares the host's network,
PIDs and this server's user: it is not a VM boundary.

Under systemd it takes the socket a .socket unit passes (socket activation,
LISTEN_FDS): 'hostfork support install' writes hostfork-serve.socket and
hostfork-serve.service for the store.

Clients: the Go package client, curl --unix-socket, and this CLI itself with
'hostfork --host unix://SOCKET VERB' (or HOSTFORK_HOST).

SIGTERM or SIGINT shut it down: it stops accepting, ends streams, and gives
in-flight requests 5s.` + companionNote,
		Args: exactArgs(0, "no arguments (use --socket, --metrics-listen, --web)"),
		RunE: func(c *cobra.Command, args []string) error {
			if run == nil {
				return g.execCompanion("serve")
			}
			return run(c, g, f)
		},
	}
	c.Flags().StringVar(&f.Socket, "socket", "", "unix socket path (default <store>/api.sock)")
	c.Flags().StringVar(&f.MetricsListen, "metrics-listen", "", "also serve GET /metrics on this loopback TCP address, e.g. 127.0.0.1:9464")
	c.Flags().StringVar(&f.Web, "web", "", "also serve the web view on this TCP address, e.g. 127.0.0.1:8088 (loopback only without --web-tls-cert/--web-tls-key)")
	c.Flags().StringVar(&f.WebTLSCert, "web-tls-cert", "", "the web view's TLS certificate (PEM file); with --web-tls-key, --web may be any address")
	c.Flags().StringVar(&f.WebTLSKey, "web-tls-key", "", "the web view's TLS private key (PEM file), with --web-tls-cert")
	c.Flags().StringVar(&f.E2BListen, "e2b-listen", "", "also answer E2B's SDKs on this TCP address, e.g. 127.0.0.1:3000 (docs/e2b.md)")
	c.Flags().StringVar(&f.E2BKeys, "e2b-keys", "", "the E2B-compatible API's keys: a file of 'NAME KEY' lines, mode 0600")
	c.Flags().StringVar(&f.E2BTemplates, "e2b-templates", "", "a directory of sandbox templates: hostfork spec files NAME.yaml")
	c.Flags().StringVar(&f.E2BTLSCert, "e2b-tls-cert", "", "serve the E2B-compatible API over TLS with this certificate (PEM)")
	c.Flags().StringVar(&f.E2BTLSKey, "e2b-tls-key", "", "the private key (PEM) of --e2b-tls-cert")
	c.Flags().StringVar(&f.E2BMaxUpload, "e2b-max-upload", "", "the largest file one upload to a sandbox may write (default 1G; e.g. 4G)")
	return c
}

func newMCPCmd(g *globals, run func(c *cobra.Command, g *Globals) error) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve hostfork's tools to a coding agent (Model Context Protocol on stdio)",
		Long: `mcp is a Model Context Protocol server on stdin/stdout with the tools run,
create, start, ps, status, logs, stop and export (docs/api.md, "MCP"). Every
call is bounded: environments expire after a ttl (default 10m) unless the
agent asks for until_stopped explicitly; a run ends with its environment.
Configure it in an agent as the command 'hostfork mcp' (with --root or
HOSTFORK_ROOT for another store).` + companionNote,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			if run == nil {
				return g.execCompanion("mcp")
			}
			return run(c, g)
		},
	}
}

// execCompanion replaces this process with the companion, given this
// call's arguments: the same process (a socket unit's LISTEN_PID still
// matches) with the same standard streams. It returns only on failure.
func (g *globals) execCompanion(verb string) error {
	f, path, err := findCompanion(verb)
	if err != nil {
		return err
	}
	defer f.Close()
	args := g.args
	if args == nil {
		args = os.Args[1:]
	}
	env := append(os.Environ(), companionBuildEnv+"="+buildLine(ReadBuildInfo()))
	// Through the descriptor: the file checked is the file run, whatever
	// happens to the path meanwhile.
	err = unix.Exec("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), append([]string{path}, args...), env)
	return withCode(ExitCapability, fmt.Errorf("'hostfork %s': executing %s: %w", verb, path, err))
}

// findCompanion opens the companion beside this executable, else on PATH.
// A candidate that exists but another user could have put or changed is
// refused, not skipped.
func findCompanion(verb string) (*os.File, string, error) {
	var tried []string
	exe, err := os.Executable()
	if err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		p := filepath.Join(filepath.Dir(exe), CompanionName)
		f, err := openCompanion(p)
		if err == nil {
			return f, p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, "", withCode(ExitCapability, fmt.Errorf("'hostfork %s': %w", verb, err))
		}
		tried = append(tried, "beside "+exe)
	}
	if p, err := exec.LookPath(CompanionName); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		f, err := openCompanion(p)
		if err == nil {
			return f, p, nil
		}
		return nil, "", withCode(ExitCapability, fmt.Errorf("'hostfork %s': %w", verb, err))
	}
	tried = append(tried, "on PATH")
	dir := "DIR"
	if exe != "" {
		dir = filepath.Dir(exe)
	}
	return nil, "", withCode(ExitCapability, fmt.Errorf("'hostfork %s' runs the companion binary %s, which is not %s: build it beside hostfork with 'go build -o %s/ ./cmd/hostfork-serve' (or 'go install ./cmd/...')",
		verb, CompanionName, joinOr(tried), dir))
}

func joinOr(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	return s[0] + " nor " + s[1]
}

// openCompanion opens p and checks that it is an executable regular file
// that only root or this user can have written: owned by one of them and
// writable by nobody else. The check is on the open descriptor.
func openCompanion(p string) (*os.File, error) {
	f, err := linux.OpenProgram(p)
	var r *linux.RefusedProgramError
	if errors.As(err, &r) {
		return nil, fmt.Errorf("refusing to run %s: %s; %s", r.Path, r.Why, r.Fix)
	}
	return f, err
}
