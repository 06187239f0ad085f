package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// HostEnv is the environment variable that names the server when New is
// given "".
const HostEnv = "HOSTFORK_HOST"

// UnixHost is the Host header the client sends over a unix socket (the
// server accepts "", "localhost" and "unix").
const UnixHost = "unix"

// Client talks to one hostfork server. It is safe for concurrent use.
type Client struct {
	base string // http://unix or http://HOST:PORT
	hc   *http.Client
	// Socket is the unix socket path ("" for an http:// server).
	socket string
}

// DefaultSocket is the socket of a server on the default store: api.sock
// in $HOSTFORK_ROOT, else /var/lib/hostfork for root, else
// $XDG_STATE_HOME/hostfork or ~/.local/state/hostfork (the library's
// DefaultRoot rule).
func DefaultSocket() (string, error) {
	root := os.Getenv("HOSTFORK_ROOT")
	switch {
	case root != "":
	case os.Geteuid() == 0:
		root = "/var/lib/hostfork"
	case os.Getenv("XDG_STATE_HOME") != "" && filepath.IsAbs(os.Getenv("XDG_STATE_HOME")):
		root = filepath.Join(os.Getenv("XDG_STATE_HOME"), "hostfork")
	default:
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no default socket: set %s=unix:///path/api.sock (%v): %w", HostEnv, err, api.ErrInvalid)
		}
		root = filepath.Join(home, ".local", "state", "hostfork")
	}
	return filepath.Join(root, "api.sock"), nil
}

// New returns a client of the server at socketOrURL: "unix:///path/api.sock",
// an absolute socket path, or an http:// URL (a server behind a proxy).
// "" means $HOSTFORK_HOST, else DefaultSocket. New does not connect.
func New(socketOrURL string) (*Client, error) {
	s := socketOrURL
	if s == "" {
		s = os.Getenv(HostEnv)
	}
	if s == "" {
		d, err := DefaultSocket()
		if err != nil {
			return nil, err
		}
		s = d
	}
	var path string
	switch {
	case strings.HasPrefix(s, "unix://"):
		path = strings.TrimPrefix(s, "unix://")
	case strings.HasPrefix(s, "/"):
		path = s
	case strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"):
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("server %q: not a URL such as http://127.0.0.1:8080: %w", s, api.ErrInvalid)
		}
		return &Client{base: strings.TrimRight(u.String(), "/"), hc: &http.Client{}}, nil
	default:
		return nil, fmt.Errorf("server %q: use unix:///path/api.sock or an absolute socket path: %w", s, api.ErrInvalid)
	}
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("server %q: the socket path must be absolute (unix:///var/lib/hostfork/api.sock): %w", s, api.ErrInvalid)
	}
	path = filepath.Clean(path)
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dialServer(ctx, path) },
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &Client{base: "http://" + UnixHost, hc: &http.Client{Transport: tr}, socket: path}, nil
}

// dialServer connects to the socket at path and checks who serves it
// before anything is sent (DESIGN.md, "Trust model"): the server's
// process (SO_PEERCRED) must run as root or as this user, else another
// user could have put their socket there to read what this client sends
// (environment values, specs) and forge the answers. A socket this user
// may not connect to is a refusal too, not a server that is down.
func dialServer(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("unix://%s: permission denied: this user may not use that server (it serves root and the store's owner); use your own store's server, or run as its owner: %w", path, api.ErrForbidden)
		}
		return nil, err
	}
	uid := -1
	if raw, err := c.(*net.UnixConn).SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
				uid = int(cred.Uid)
			}
		})
	}
	if me := os.Geteuid(); uid != 0 && uid != me {
		c.Close()
		who := fmt.Sprintf("uid %d", uid)
		if uid < 0 {
			who = "an unknown user (no peer credentials)"
		}
		return nil, fmt.Errorf("unix://%s is served by %s, neither root nor you (uid %d): nothing was sent to it; check who made that socket, or point --host (%s) at your own server: %w", path, who, me, HostEnv, api.ErrForbidden)
	}
	return c, nil
}

// Socket is the server's unix socket path ("" for an http:// server).
func (c *Client) Socket() string { return c.socket }

// Close releases idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// do sends one request and returns the response of a 2xx answer; any other
// answer becomes an *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
	var rd io.Reader
	ctype := "application/json"
	if r, ok := body.(io.Reader); ok {
		// A raw body (a file written into an environment), streamed.
		rd, ctype = r, "application/octet-stream"
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request: %v: %w", err, api.ErrInvalid)
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v: %w", method, path, err, api.ErrInvalid)
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("hostfork server %s: %w", c.where(), err)
	}
	if resp.Header.Get(VersionHeader) == "" {
		resp.Body.Close()
		return nil, fmt.Errorf("%s answered without a %s header: it is not a hostfork server", c.where(), VersionHeader)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

func (c *Client) where() string {
	if c.socket != "" {
		return "unix://" + c.socket
	}
	return c.base
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Message == "" {
		eb.Message = fmt.Sprintf("hostfork server: HTTP %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return &Error{Status: resp.StatusCode, Message: eb.Message, Cause: eb.Cause, ExitCode: eb.ExitCode, sentinel: sentinelOf(eb.Cause)}
}

// call sends a request and decodes a JSON answer into out (unless nil).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := c.do(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// callAs is call decoding the answer into a T.
func callAs[T any](c *Client, ctx context.Context, method, path string, q url.Values, body any) (T, error) {
	var out T
	if err := c.call(ctx, method, path, q, body, &out); err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// callPtr is callAs answering a pointer.
func callPtr[T any](c *Client, ctx context.Context, method, path string, q url.Values, body any) (*T, error) {
	out, err := callAs[T](c, ctx, method, path, q, body)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// setIf sets a query parameter when cond holds.
func setIf(q url.Values, cond bool, key, val string) {
	if cond {
		q.Set(key, val)
	}
}

func esc(id string) string { return url.PathEscape(id) }

// Ping checks that the server answers.
func (c *Client) Ping(ctx context.Context) error {
	var p Ping
	return c.call(ctx, http.MethodGet, "/v1/_ping", nil, nil, &p)
}

// Version returns the server's build provenance.
func (c *Client) Version(ctx context.Context) (*VersionInfo, error) {
	return callPtr[VersionInfo](c, ctx, http.MethodGet, "/v1/version", nil, nil)
}

// ReadOption changes what an answer holds.
type ReadOption func(url.Values)

// ShowEnv asks for the values of the spec's explicit environment
// variables, which answers redact by default (they may be secrets).
func ShowEnv() ReadOption { return func(q url.Values) { q.Set("show_env", "1") } }

func query(opts []ReadOption) url.Values {
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	return q
}

// Envs lists environments by filter, oldest first, each with its commands.
// Spec environment values are redacted (unless ShowEnv).
func (c *Client) Envs(ctx context.Context, f api.EnvFilter, opts ...ReadOption) ([]api.Env, error) {
	q := query(opts)
	for _, l := range f.Labels {
		q.Add("label", l)
	}
	for _, s := range f.States {
		q.Add("state", string(s))
	}
	setIf(q, f.Active, "active", "1")
	return callAs[[]api.Env](c, ctx, http.MethodGet, "/v1/envs", q, nil)
}

// Env returns one environment (by id or unique prefix) with its commands.
func (c *Client) Env(ctx context.Context, id string, opts ...ReadOption) (*api.Env, error) {
	return callPtr[api.Env](c, ctx, http.MethodGet, "/v1/envs/"+esc(id), query(opts), nil)
}

// Resolve says what an id or a unique prefix names: kind "env" or
// "command", and the whole id.
func (c *Client) Resolve(ctx context.Context, idPrefix string) (kind, id string, err error) {
	var out Resolved
	if err := c.call(ctx, http.MethodGet, "/v1/resolve/"+esc(idPrefix), nil, nil, &out); err != nil {
		return "", "", err
	}
	return out.Kind, out.ID, nil
}

// Plan resolves an environment spec against the server's host and
// creates nothing. The answer is the JSON of spec.Plan (as 'hostfork plan
// --json' prints it; package spec is not a dependency of this one).
func (c *Client) Plan(ctx context.Context, spec any) (json.RawMessage, error) {
	if spec == nil {
		spec = map[string]any{}
	}
	return callAs[json.RawMessage](c, ctx, http.MethodPost, "/v1/plan", nil, spec)
}

// Run creates an environment with its first command (detached, output in
// files) and returns the environment with the command: the environment
// stops when the command's tree has exited, or at its deadline.
func (c *Client) Run(ctx context.Context, req RunRequest, opts ...ReadOption) (*api.Env, error) {
	if req.Env == nil {
		req.Env = map[string]any{}
	}
	return callPtr[api.Env](c, ctx, http.MethodPost, "/v1/runs", query(opts), req)
}

// CreateEnv creates an environment from spec: a spec.Environment, or
// anything that marshals to a spec file's JSON (a map, json.RawMessage).
// Its lifetime needs max_runtime or until_stopped; owner_exit is detach
// (the environment outlives the server).
func (c *Client) CreateEnv(ctx context.Context, spec any, opts ...ReadOption) (*api.Env, error) {
	if spec == nil {
		spec = map[string]any{}
	}
	return callPtr[api.Env](c, ctx, http.MethodPost, "/v1/envs", query(opts), spec)
}

// StopOptions configure a stop.
type StopOptions struct {
	// Grace is how long members get after SIGTERM before SIGKILL; 0 means
	// the environment's grace, a negative value none (kill at once).
	Grace time.Duration
	// Abandon releases an unverified tree without proof of its exit (see
	// the library's StopOptions.Abandon).
	Abandon bool
	// Reason is the stop reason to record: "" or api.ReasonUser (the
	// default), or api.ReasonOwnerExit (a client ending what its
	// foreground command left behind).
	Reason api.StopReason
}

func (o StopOptions) query(opts []ReadOption) url.Values {
	q := query(opts)
	switch {
	case o.Grace > 0:
		q.Set("grace", o.Grace.String())
	case o.Grace < 0:
		q.Set("grace", "0s") // kill at once
	}
	setIf(q, o.Abandon, "abandon", "1")
	setIf(q, o.Reason != "", "reason", string(o.Reason))
	return q
}

// StopEnv stops an environment: every command tree, then the environment.
// It deletes no file.
func (c *Client) StopEnv(ctx context.Context, id string, opts StopOptions, ropts ...ReadOption) (*api.Env, error) {
	return callPtr[api.Env](c, ctx, http.MethodPost, "/v1/envs/"+esc(id)+"/stop", opts.query(ropts), nil)
}

// Extend moves an environment's deadline (POST /v1/envs/{id}/deadline):
// later or earlier, within the store's lifetime.max.
func (c *Client) Extend(ctx context.Context, id string, req api.DeadlineRequest) (*api.Env, error) {
	return callPtr[api.Env](c, ctx, http.MethodPost, "/v1/envs/"+esc(id)+"/deadline", nil, req)
}

// Export copies one of the environment's trees to dest (absolute, must
// not exist), created by the server.
func (c *Client) Export(ctx context.Context, env, tree, dest string) (*api.ExportResult, error) {
	return c.ExportTree(ctx, env, ExportRequest{Tree: tree, Destination: dest})
}

// ExportTree is Export with every option of the request: for a worktree
// tree, req.Commit commits on its branch first (and an empty Destination
// copies nothing).
func (c *Client) ExportTree(ctx context.Context, env string, req ExportRequest) (*api.ExportResult, error) {
	return callPtr[api.ExportResult](c, ctx, http.MethodPost, "/v1/envs/"+esc(env)+"/export", nil, req)
}

// StartCommand starts a detached command in an environment (output in
// files) and returns its record.
func (c *Client) StartCommand(ctx context.Context, env string, req CommandRequest) (*api.Command, error) {
	return callPtr[api.Command](c, ctx, http.MethodPost, "/v1/envs/"+esc(env)+"/commands", nil, req)
}

// Commands lists commands by filter, oldest first. f.Env may be an id
// prefix.
func (c *Client) Commands(ctx context.Context, f api.CommandFilter) ([]api.Command, error) {
	q := url.Values{}
	setIf(q, f.Env != "", "env", f.Env)
	for _, l := range f.Labels {
		q.Add("label", l)
	}
	for _, s := range f.States {
		q.Add("state", string(s))
	}
	setIf(q, f.Live, "live", "1")
	setIf(q, f.Brief, "brief", "1")
	return callAs[[]api.Command](c, ctx, http.MethodGet, "/v1/commands", q, nil)
}

// Command returns one command's record (by id or unique prefix).
func (c *Client) Command(ctx context.Context, id string) (*api.Command, error) {
	return callPtr[api.Command](c, ctx, http.MethodGet, "/v1/commands/"+esc(id), nil, nil)
}

// WaitCondition says what Wait waits for.
type WaitCondition string

// Wait conditions.
const (
	// WaitLeader: the leader process exited (the library's Command.Wait).
	WaitLeader WaitCondition = "leader"
	// WaitTree: the whole tree is gone and its record is final (WaitTree).
	WaitTree WaitCondition = "tree"
)

// Wait blocks until the command's leader exited (WaitLeader) or its whole
// tree is gone and recorded (WaitTree, also for ""), or ctx ends.
func (c *Client) Wait(ctx context.Context, id string, cond WaitCondition) (*api.Command, error) {
	cond = cmp.Or(cond, WaitTree)
	q := url.Values{"condition": {string(cond)}}
	return callPtr[api.Command](c, ctx, http.MethodGet, "/v1/commands/"+esc(id)+"/wait", q, nil)
}

// WaitOptions say what WaitFor waits for (GET /v1/commands/{id}/wait):
// a pattern in the output, a stall, or with neither the Condition; and
// for how long at most.
type WaitOptions struct {
	// Condition is leader or tree (the default) for a plain wait.
	Condition WaitCondition
	// For is a regular expression (Go's RE2 syntax) a line of the output
	// must match; Stream limits it to stdout or stderr, Since starts it at
	// a byte offset of Stream.
	For    string
	Stream string
	Since  int64
	// Stalled returns once the command has written nothing for this long.
	Stalled time.Duration
	// Timeout bounds the wait on the server: past it the answer is an
	// error matching api.ErrTimedOut (the command runs on).
	Timeout time.Duration
}

// WaitFor blocks until what o says holds and returns why (match, stalled,
// ended, leader or tree) with the command's record then.
func (c *Client) WaitFor(ctx context.Context, id string, o WaitOptions) (*api.WaitOutcome, error) {
	q := url.Values{}
	setIf(q, o.Condition != "", "condition", string(o.Condition))
	setIf(q, o.For != "", "for", o.For)
	setIf(q, o.Stream != "", "stream", o.Stream)
	setIf(q, o.Since != 0, "since", strconv.FormatInt(o.Since, 10))
	setIf(q, o.Stalled != 0, "stalled", o.Stalled.String())
	setIf(q, o.Timeout != 0, "timeout", o.Timeout.String())
	return callPtr[api.WaitOutcome](c, ctx, http.MethodGet, "/v1/commands/"+esc(id)+"/wait", q, nil)
}

// Signal sends sig to the command's leader process only.
func (c *Client) Signal(ctx context.Context, id string, sig syscall.Signal) (*api.Command, error) {
	return callPtr[api.Command](c, ctx, http.MethodPost, "/v1/commands/"+esc(id)+"/signal", nil, SignalRequest{Signal: strconv.Itoa(int(sig))})
}

// StopCommand stops the command's whole tree and returns its final record.
func (c *Client) StopCommand(ctx context.Context, id string, opts StopOptions) (*api.Command, error) {
	return callPtr[api.Command](c, ctx, http.MethodPost, "/v1/commands/"+esc(id)+"/stop", opts.query(nil), nil)
}

// LogOptions select what Logs reads.
type LogOptions struct {
	// Stream is "stdout" (default) or "stderr".
	Stream string
	// Offset is the byte offset to start at: a reader that reconnects
	// with the count of bytes it has resumes exactly where it stopped.
	Offset int64
	// Follow keeps the stream open as the command writes, until its tree
	// has exited and everything is read.
	Follow bool
	// Tail starts at the last Tail lines instead of Offset (LogsAt says
	// at which offset).
	Tail int
}

// LogOffsetHeader is the answer header of GET /logs that says at which
// byte offset the stream starts.
const LogOffsetHeader = "Hostfork-Log-Offset"

// Logs returns the raw bytes of a command's stdout or stderr from an
// offset. Close it when done; cancelling ctx ends it too. A followed
// stream ends with io.EOF only when the command's tree has exited and
// everything is read; any other end (the server stopped) is an error such
// as io.ErrUnexpectedEOF: resume with Offset advanced by the bytes read.
func (c *Client) Logs(ctx context.Context, id string, opts LogOptions) (io.ReadCloser, error) {
	rc, _, err := c.LogsAt(ctx, id, opts)
	return rc, err
}

// LogsAt is Logs that also returns the offset the stream starts at (the
// start of the last Tail lines, with Tail).
func (c *Client) LogsAt(ctx context.Context, id string, opts LogOptions) (io.ReadCloser, int64, error) {
	q := url.Values{}
	setIf(q, opts.Stream != "", "stream", opts.Stream)
	setIf(q, opts.Offset != 0, "offset", strconv.FormatInt(opts.Offset, 10))
	setIf(q, opts.Tail != 0, "tail", strconv.Itoa(opts.Tail))
	setIf(q, opts.Follow, "follow", "1")
	resp, err := c.do(ctx, http.MethodGet, "/v1/commands/"+esc(id)+"/logs", q, nil)
	if err != nil {
		return nil, 0, err
	}
	off, err := strconv.ParseInt(resp.Header.Get(LogOffsetHeader), 10, 64)
	if err != nil {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("%s answered logs without a valid %s header: %w", c.where(), LogOffsetHeader, api.ErrInvalid)
	}
	return resp.Body, off, nil
}

// Events yields the server's events after sequence since, in order. With
// follow it keeps yielding as new events are committed until ctx ends (a
// last ctx.Err()) or the connection ends (a last error; resume with the
// last sequence seen). A consumer that resumes with the last sequence it
// saw misses nothing and sees nothing twice.
func (c *Client) Events(ctx context.Context, since int64, follow bool) iter.Seq2[api.Event, error] {
	q := url.Values{"since": {strconv.FormatInt(since, 10)}, "follow": {"0"}}
	setIf(q, follow, "follow", "1")
	return ndjson[api.Event](c, ctx, "/v1/events", q, func(err error) error {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, io.EOF) && !follow:
			return nil
		case errors.Is(err, io.EOF):
			return fmt.Errorf("the event stream of %s ended (resume with since=%d): %w", c.where(), since, api.ErrClosed)
		}
		return fmt.Errorf("reading events from %s: %w", c.where(), err)
	})
}

// Capacity returns the admission computation and the live workloads.
func (c *Client) Capacity(ctx context.Context) (*api.CapacityReport, error) {
	return callPtr[api.CapacityReport](c, ctx, http.MethodGet, "/v1/capacity", nil, nil)
}

// Pause pauses admission of new agent workloads.
func (c *Client) Pause(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/pause", nil, nil, nil)
}

// Resume resumes admission.
func (c *Client) Resume(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/resume", nil, nil, nil)
}

// Reap reconciles the ledger with what exists (idempotent).
func (c *Client) Reap(ctx context.Context) (*api.ReapReport, error) {
	return callPtr[api.ReapReport](c, ctx, http.MethodPost, "/v1/reap", nil, nil)
}

// Usage measures the store.
func (c *Client) Usage(ctx context.Context) (*api.Usage, error) {
	return callPtr[api.Usage](c, ctx, http.MethodGet, "/v1/usage", nil, nil)
}

// GC applies retention to stopped environments (see GCRequest).
func (c *Client) GC(ctx context.Context, req GCRequest) (*api.GCReport, error) {
	return callPtr[api.GCReport](c, ctx, http.MethodPost, "/v1/gc", nil, req)
}

// Baselines lists the registered baselines.
func (c *Client) Baselines(ctx context.Context) ([]*api.Baseline, error) {
	return callAs[[]*api.Baseline](c, ctx, http.MethodGet, "/v1/baselines", nil, nil)
}

// AddBaseline registers the directory or Btrfs subvolume at path (absolute,
// on the server's host) as baseline name.
func (c *Client) AddBaseline(ctx context.Context, name, path string) (*api.Baseline, error) {
	return callPtr[api.Baseline](c, ctx, http.MethodPost, "/v1/baselines", nil, BaselineRequest{Name: name, Path: path})
}

// RemoveBaseline unregisters a baseline; its files are left alone.
func (c *Client) RemoveBaseline(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/baselines/"+esc(name), nil, nil, nil)
}

// BtrfsSizes measures each Btrfs tree's exclusive and shared bytes (slow).
func (c *Client) BtrfsSizes(ctx context.Context) ([]api.BtrfsSize, error) {
	return callAs[[]api.BtrfsSize](c, ctx, http.MethodGet, "/v1/usage/btrfs", nil, nil)
}

// Doctor returns the server host's doctor report, as `hostfork doctor
// --json` prints it (its type is not part of package api).
func (c *Client) Doctor(ctx context.Context) (json.RawMessage, error) {
	return callAs[json.RawMessage](c, ctx, http.MethodGet, "/v1/doctor", nil, nil)
}

// ReadFile streams the file path of environment env (GET
// /v1/envs/{id}/files), resolved inside its view.
func (c *Client) ReadFile(ctx context.Context, env, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/envs/"+esc(env)+"/files", url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile replaces the file path of environment env with src, streamed
// (PUT /v1/envs/{id}/files); perm 0 keeps an existing file's permissions.
func (c *Client) WriteFile(ctx context.Context, env, path string, src io.Reader, perm os.FileMode) (*api.DirEntry, error) {
	q := url.Values{"path": {path}}
	setIf(q, perm != 0, "mode", fmt.Sprintf("%04o", uint32(perm.Perm())))
	return callPtr[api.DirEntry](c, ctx, http.MethodPut, "/v1/envs/"+esc(env)+"/files", q, io.NopCloser(src))
}

// Mkdir creates the directory path of environment env (PUT
// /v1/envs/{id}/dir); its parent must exist.
func (c *Client) Mkdir(ctx context.Context, env, path string, perm os.FileMode) error {
	q := url.Values{"path": {path}, "mode": {fmt.Sprintf("%04o", uint32(perm.Perm()))}}
	return c.call(ctx, http.MethodPut, "/v1/envs/"+esc(env)+"/dir", q, nil, &api.DirEntry{})
}

// Stat describes the file path of environment env (GET /v1/envs/{id}/stat).
func (c *Client) Stat(ctx context.Context, env, path string) (*api.DirEntry, error) {
	return callPtr[api.DirEntry](c, ctx, http.MethodGet, "/v1/envs/"+esc(env)+"/stat", url.Values{"path": {path}}, nil)
}

// ReadDir lists the directory path of environment env to depth levels
// (GET /v1/envs/{id}/dir; 0: the whole tree).
func (c *Client) ReadDir(ctx context.Context, env, path string, depth int) ([]api.DirEntry, error) {
	q := url.Values{"path": {path}, "depth": {strconv.Itoa(depth)}}
	return callAs[[]api.DirEntry](c, ctx, http.MethodGet, "/v1/envs/"+esc(env)+"/dir", q, nil)
}

// Watch yields the changes in the directory path of environment env (GET
// /v1/envs/{id}/watch, NDJSON) until ctx ends or the server ends the
// stream (the directory was removed).
func (c *Client) Watch(ctx context.Context, env, path string, recursive bool) iter.Seq2[api.FileEvent, error] {
	q := url.Values{"path": {path}}
	setIf(q, recursive, "recursive", "1")
	return ndjson[api.FileEvent](c, ctx, "/v1/envs/"+esc(env)+"/watch", q, func(err error) error {
		if ctx.Err() == nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading changes from %s: %w", c.where(), err)
		}
		return nil
	})
}

// ndjson yields the values of a GET answer of JSON lines; the error that
// ends the answer is yielded as end makes it (nil: none).
func ndjson[T any](c *Client, ctx context.Context, path string, q url.Values, end func(error) error) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		resp, err := c.do(ctx, http.MethodGet, path, q, nil)
		if err != nil {
			yield(zero, err)
			return
		}
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var v T
			if err := dec.Decode(&v); err != nil {
				if err := end(err); err != nil {
					yield(zero, err)
				}
				return
			}
			if !yield(v, nil) {
				return
			}
		}
	}
}

// Fork makes environments whose trees start as env's trees at one instant
// (hostfork.Env.Fork) and returns their records.
func (c *Client) Fork(ctx context.Context, env string, req ForkRequest) ([]api.Env, error) {
	return callAs[[]api.Env](c, ctx, http.MethodPost, "/v1/envs/"+esc(env)+"/fork", nil, req)
}
