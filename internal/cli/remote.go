package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/spec"
)

// reconnectFor is how long a foreground run or exec, and a followed log,
// keep trying to reach a server that went away (restarted, upgraded)
// before giving up. The command runs on meanwhile: it belongs to the
// server's store, not to the connection.
const reconnectFor = time.Minute

// admissionPoll is how often a command waiting for admission through a
// server asks again (the API answers 429 instead of waiting).
const admissionPoll = time.Second

// remote is a running 'hostfork serve' (--host). The client's calls that
// answer as the backend does (Resolve, Commands, Reap, ...) serve as they are.
type remote struct {
	*client.Client
	// err receives notices (a lost server, reconnecting).
	err  io.Writer
	mu   sync.Mutex
	lost bool // a notice about the lost server was printed
	// showEnv: the verb shows explicit environment values (--show-env).
	showEnv bool
}

func (r *remote) Where() string {
	if s := r.Client.Socket(); s != "" {
		return "unix://" + s
	}
	return "the server"
}

func stopOpts(o hostfork.StopOptions) client.StopOptions {
	return client.StopOptions{Grace: o.Grace, Abandon: o.Abandon, Reason: o.Reason}
}

// env asks the server for the spec's explicit environment values only
// when this verb shows them (--show-env): otherwise they stay redacted in
// the answer, and the CLI redacts them itself too, as in-process (issue
// 39, item 2: the client sends and receives values only when it must).
func (r *remote) env() []client.ReadOption {
	if r.showEnv {
		return []client.ReadOption{client.ShowEnv()}
	}
	return nil
}

func (r *remote) Status(ctx context.Context, idPrefix string) (*hostfork.EnvRecord, *hostfork.CommandRecord, error) {
	kind, id, err := r.Client.Resolve(ctx, idPrefix)
	if err != nil {
		return nil, nil, err
	}
	if kind == "command" {
		c, err := r.Client.Command(ctx, id)
		return nil, c, err
	}
	e, err := r.Client.Env(ctx, id, r.env()...)
	return e, nil, err
}

func (r *remote) Envs(ctx context.Context, f hostfork.EnvFilter) ([]hostfork.EnvRecord, error) {
	return r.Client.Envs(ctx, f, r.env()...)
}

// Events follows the server's event log; a follow cut by the server's
// restart resumes after the last sequence seen (missing nothing, repeating
// nothing) for up to reconnectFor.
func (r *remote) Events(ctx context.Context, since int64, follow bool) iter.Seq2[hostfork.Event, error] {
	return func(yield func(hostfork.Event, error) bool) {
		var cut time.Time
		for {
			var last error
			for ev, err := range r.Client.Events(ctx, since, follow) {
				if err != nil {
					last = err
					break
				}
				since, cut = ev.Seq, time.Time{}
				if !yield(ev, nil) {
					return
				}
			}
			if last == nil {
				return
			}
			if !follow || !transient(last) || ctx.Err() != nil {
				yield(hostfork.Event{}, last)
				return
			}
			if err := r.outage(ctx, &cut, "following events", last, 500*time.Millisecond); err != nil {
				yield(hostfork.Event{}, err)
				return
			}
		}
	}
}

func (r *remote) Plan(ctx context.Context, s spec.Environment) (*hostfork.Plan, error) {
	raw, err := r.Client.Plan(ctx, s)
	if err != nil {
		return nil, err
	}
	var p hostfork.Plan
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("the plan from %s: %w", r.Where(), err)
	}
	return &p, nil
}

func (r *remote) Create(ctx context.Context, p *hostfork.Plan) (*hostfork.EnvRecord, error) {
	return r.Client.CreateEnv(ctx, p.Spec, r.env()...)
}

// request is a launch request as the API takes it. The command's working
// directory defaults to this process's, as in-process.
func (r *remote) request(lr *launchReq) (client.CommandRequest, error) {
	cwd := lr.cwd
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return client.CommandRequest{}, usageErr("the working directory: %v (give --cwd)", err)
		}
		cwd = wd
	}
	req := client.CommandRequest{Argv: lr.argv, Cwd: cwd, Env: lr.envSet, EnvPolicy: lr.envPolicy,
		Labels: lr.labels, Purpose: lr.purpose, Timeout: api.Duration(lr.timeout),
		Workload: lr.workload, Admit: lr.admit}
	switch lr.session {
	case "tty":
		req.TTY, req.Cols, req.Rows = true, lr.size.Cols, lr.size.Rows
	case "stdin":
		req.Stdin = "pipe"
	}
	return req, nil
}

// admitted launches through fn, waiting for admission as the library does
// for an agent workload with admit wait (the default): the API refuses at
// once (429), so the request is repeated every admissionPoll until it is
// admitted.
func (r *remote) admitted(ctx context.Context, lr *launchReq, req *client.CommandRequest, fn func() error) error {
	wait := req.Workload == hostfork.WorkloadAgent && (req.Admit == "" || req.Admit == hostfork.AdmitWait)
	if wait {
		req.Admit = hostfork.AdmitFail
	}
	told := false
	for {
		err := fn()
		if !wait || !errors.Is(err, api.ErrAdmissionRefused) {
			return err
		}
		if !told && lr.onAdmissionWait != nil {
			lr.onAdmissionWait(errText(err))
			told = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(admissionPoll):
		}
	}
}

func (r *remote) Run(ctx context.Context, p *hostfork.Plan, lr *launchReq) (launched, error) {
	req, err := r.request(lr)
	if err != nil {
		return nil, err
	}
	var env *api.Env
	err = r.admitted(ctx, lr, &req, func() (err error) {
		env, err = r.Client.Run(ctx, client.RunRequest{Env: p.Spec, Command: req}, r.env()...)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(env.Commands) == 0 {
		return nil, fmt.Errorf("%s made environment %s without its command", r.Where(), env.ID)
	}
	return &remoteCmd{r: r, rec: env.Commands[0]}, nil
}

func (r *remote) Start(ctx context.Context, envPrefix string, lr *launchReq) (launched, error) {
	req, err := r.request(lr)
	if err != nil {
		return nil, err
	}
	var cmd *api.Command
	err = r.admitted(ctx, lr, &req, func() (err error) {
		cmd, err = r.Client.StartCommand(ctx, envPrefix, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &remoteCmd{r: r, rec: *cmd}, nil
}

func (r *remote) StopEnv(ctx context.Context, idPrefix string, o hostfork.StopOptions) (*hostfork.EnvRecord, error) {
	rec, err := r.Client.StopEnv(ctx, idPrefix, stopOpts(o), r.env()...)
	if err != nil && errors.Is(err, api.ErrUnverified) {
		// As in-process: the record comes with the failure.
		if e, gerr := r.Client.Env(ctx, idPrefix, r.env()...); gerr == nil {
			return e, err
		}
	}
	return rec, err
}

func (r *remote) StopCommand(ctx context.Context, idPrefix string, o hostfork.StopOptions) (*hostfork.CommandRecord, error) {
	rec, err := r.Client.StopCommand(ctx, idPrefix, stopOpts(o))
	if err != nil && errors.Is(err, api.ErrUnverified) {
		if c, gerr := r.Client.Command(ctx, idPrefix); gerr == nil {
			return c, err
		}
	}
	return rec, err
}

// Export sends an absolute destination: the server resolves nothing
// against this process's directory. Progress is not reported.
func (r *remote) Export(ctx context.Context, envPrefix, tree, dest string, o hostfork.ExportOptions) (*hostfork.ExportResult, error) {
	abs := ""
	if dest != "" {
		var err error
		if abs, err = filepath.Abs(dest); err != nil {
			return nil, usageErr("--to %s: %v", dest, err)
		}
	}
	return r.Client.ExportTree(ctx, envPrefix, client.ExportRequest{Tree: tree, Destination: abs, Commit: o.Commit})
}

func (r *remote) OpenFile(ctx context.Context, envPrefix, name string) (io.ReadCloser, error) {
	return r.Client.ReadFile(ctx, envPrefix, name)
}

func (r *remote) WriteFile(ctx context.Context, envPrefix, name string, src io.Reader, perm os.FileMode) (hostfork.DirEntry, error) {
	e, err := r.Client.WriteFile(ctx, envPrefix, name, src, perm)
	if err != nil {
		return hostfork.DirEntry{}, err
	}
	return *e, nil
}

func (r *remote) Stat(ctx context.Context, envPrefix, name string) (hostfork.DirEntry, error) {
	e, err := r.Client.Stat(ctx, envPrefix, name)
	if err != nil {
		return hostfork.DirEntry{}, err
	}
	return *e, nil
}

func (r *remote) SetPaused(ctx context.Context, paused bool) error {
	if paused {
		return r.Client.Pause(ctx)
	}
	return r.Client.Resume(ctx)
}

func (r *remote) GC(ctx context.Context, o hostfork.GCOptions) (*hostfork.GCReport, error) {
	req := client.GCRequest{DryRun: o.DryRun, Force: o.Force, DeleteBranches: o.DeleteBranches}
	if o.RetainTrees != nil {
		d := api.Duration(*o.RetainTrees)
		req.RetainTrees = &d
	}
	if o.RetainEvidence != nil {
		d := api.Duration(*o.RetainEvidence)
		req.RetainEvidence = &d
	}
	return r.Client.GC(ctx, req)
}

// AddBaseline sends an absolute path: the server resolves nothing against
// this process's directory.
func (r *remote) AddBaseline(ctx context.Context, name, path string) (*hostfork.Baseline, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, usageErr("%s: %v", path, err)
	}
	return r.Client.AddBaseline(ctx, name, abs)
}

func (r *remote) RecaptureHostShell(context.Context) error {
	return usageErr("--recapture-env can't go with --host: the server captures its own user's login shell (run 'hostfork run --recapture-env' on the server's host without --host)")
}

// transient reports whether err may pass when the request is repeated:
// the server went away (a refused or cut connection) or is shutting down
// (503). Answers of a server that runs are final.
func transient(err error) bool {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Status == http.StatusServiceUnavailable
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, api.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// retry runs fn until it succeeds, fails for good, ctx ends, or the server
// has been unreachable for reconnectFor. The first loss is reported once.
func (r *remote) retry(ctx context.Context, what string, fn func() error) error {
	var cut time.Time
	delay := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		if err := r.outage(ctx, &cut, what, err, delay); err != nil {
			return err
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// outage pauses for d before the next attempt after err, the server lost
// since *cut: the first loss sets *cut (with a notice about what, unless
// what is ""); only its caller restarts the clock, on progress. It returns
// err once the server has been lost for more than reconnectFor, and ctx's
// error when ctx ends first.
func (r *remote) outage(ctx context.Context, cut *time.Time, what string, err error, d time.Duration) error {
	if cut.IsZero() {
		*cut = time.Now()
		if what != "" {
			r.notice("hostfork: %s: lost %s (%s); reconnecting for up to %v\n", what, r.Where(), errText(err), reconnectFor)
		}
	} else if time.Since(*cut) > reconnectFor {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (r *remote) notice(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.lost {
		r.lost = true
		fmt.Fprintf(r.err, format, args...)
	}
}

// Logs reads a command's artifact through the server, resuming from the
// bytes it has when the connection is cut (the server restarted): a
// followed stream ends only with the tree's exit (docs/api.md, "logs").
func (r *remote) Logs(ctx context.Context, id string, o hostfork.LogOptions) (io.ReadCloser, error) {
	l := &remoteLogs{ctx: ctx, r: r, id: id, o: client.LogOptions{Stream: o.Stream, Offset: o.Offset, Follow: o.Follow, Tail: o.Tail}}
	if err := l.connect(); err != nil {
		return nil, err
	}
	return l, nil
}

type remoteLogs struct {
	ctx context.Context
	r   *remote
	id  string
	o   client.LogOptions
	rc  io.ReadCloser
	// cut is when the stream was first cut without progress since.
	cut time.Time
}

func (l *remoteLogs) connect() error {
	return l.r.retry(l.ctx, "the output of command "+l.id, func() error {
		rc, off, err := l.r.Client.LogsAt(l.ctx, l.id, l.o)
		if err == nil {
			// A tail's start is an offset now: a reconnection resumes
			// from the bytes read, not from a new tail.
			l.rc, l.o.Offset, l.o.Tail = rc, off, 0
		}
		return err
	})
}

// SessionOf reaches a command's session through the server: input and
// resize as requests, attach as its WebSocket.
func (r *remote) SessionOf(ctx context.Context, id string) (sessionCmd, error) {
	return remoteSession{r: r, id: id}, nil
}

type remoteSession struct {
	r  *remote
	id string
}

func (s remoteSession) Send(ctx context.Context, p []byte) error {
	return s.r.Client.Send(ctx, s.id, p)
}
func (s remoteSession) CloseStdin(ctx context.Context) error { return s.r.Client.CloseStdin(ctx, s.id) }
func (s remoteSession) Resize(ctx context.Context, cols, rows uint16) error {
	return s.r.Client.Resize(ctx, s.id, cols, rows)
}

func (s remoteSession) Attach(ctx context.Context, o hostfork.AttachOptions) (attached, error) {
	cs, err := s.r.Client.Attach(ctx, s.id, client.AttachOptions{Replay: &o.Replay, NoStdin: o.NoStdin})
	if err != nil {
		return nil, err
	}
	return remoteAttached{Session: cs, s: s}, nil
}

// remoteAttached is an attach through the server's WebSocket.
type remoteAttached struct {
	*client.Session
	s remoteSession
}

// Exit reads the record the leader's exit left (the WebSocket's exit
// frame says only the code and signal; the record also says whether
// hostfork ended it).
func (a remoteAttached) Exit(ctx context.Context) (hostfork.CommandRecord, error) {
	rec, err := a.s.r.Client.Wait(ctx, a.s.id, client.WaitLeader)
	if err != nil {
		return hostfork.CommandRecord{}, err
	}
	return *rec, nil
}

// WaitUntil waits through the server, which bounds the wait by timeout
// (an error matching ErrTimedOut past it); a connection cut meanwhile (the
// server restarted) is retried.
func (r *remote) WaitUntil(ctx context.Context, id string, o hostfork.WaitOptions, timeout time.Duration) (hostfork.WaitOutcome, error) {
	co := client.WaitOptions{Condition: client.WaitLeader, Stream: o.Stream, Since: o.Since, Stalled: o.Stalled, Timeout: timeout}
	if o.Tree {
		co.Condition = client.WaitTree
	}
	if o.For != nil {
		co.For, co.Condition = o.For.String(), ""
	}
	if o.Stalled > 0 {
		co.Condition = ""
	}
	var out *hostfork.WaitOutcome
	err := r.retry(ctx, "the wait for command "+id, func() error {
		var err error
		out, err = r.Client.WaitFor(ctx, id, co)
		return err
	})
	if err != nil {
		return hostfork.WaitOutcome{}, err
	}
	return *out, nil
}

func (l *remoteLogs) Read(p []byte) (int, error) {
	for {
		if l.rc == nil {
			if err := l.connect(); err != nil {
				return 0, err
			}
		}
		n, err := l.rc.Read(p)
		l.o.Offset += int64(n)
		if n > 0 {
			l.cut = time.Time{}
		}
		switch {
		case err == nil || (n > 0 && err == io.EOF):
			return n, nil
		case err == io.EOF:
			return 0, io.EOF
		case !transient(err) || l.ctx.Err() != nil:
			return n, err
		}
		// Cut: resume from the offset reached, pausing when no byte came
		// through since the last cut.
		l.rc.Close()
		l.rc = nil
		if n > 0 {
			return n, nil
		}
		if err := l.r.outage(l.ctx, &l.cut, "", err, 200*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func (l *remoteLogs) Close() error {
	if l.rc != nil {
		return l.rc.Close()
	}
	return nil
}

// remoteCmd is a command of the server, followed by a foreground run or
// exec.
type remoteCmd struct {
	r   *remote
	mu  sync.Mutex
	rec hostfork.CommandRecord
}

func (c *remoteCmd) ID() string { return c.rec.ID }

func (c *remoteCmd) Record() hostfork.CommandRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec
}

func (c *remoteCmd) set(rec *hostfork.CommandRecord) {
	if rec != nil {
		c.mu.Lock()
		c.rec = *rec
		c.mu.Unlock()
	}
}

func (c *remoteCmd) Signal(sig syscall.Signal) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := c.r.Client.Signal(ctx, c.rec.ID, sig)
	c.set(rec)
	return err
}

func (c *remoteCmd) StopTree(ctx context.Context, o hostfork.StopOptions) (hostfork.CommandRecord, error) {
	var rec *hostfork.CommandRecord
	err := c.r.retry(ctx, "stopping command "+c.rec.ID, func() (err error) {
		rec, err = c.r.StopCommand(ctx, c.rec.ID, o)
		return err
	})
	c.set(rec)
	if rec == nil {
		return hostfork.CommandRecord{}, err
	}
	return *rec, err
}

func (c *remoteCmd) wait(ctx context.Context, cond client.WaitCondition) (hostfork.CommandRecord, error) {
	var rec *hostfork.CommandRecord
	err := c.r.retry(ctx, "waiting for command "+c.rec.ID, func() (err error) {
		rec, err = c.r.Client.Wait(ctx, c.rec.ID, cond)
		return err
	})
	if err != nil && errors.Is(err, api.ErrUnverified) {
		// As in-process: the record comes with the failure.
		rec, _ = c.r.Client.Command(ctx, c.rec.ID)
	}
	c.set(rec)
	if rec == nil {
		return hostfork.CommandRecord{}, err
	}
	return *rec, err
}

func (c *remoteCmd) Wait(ctx context.Context) (hostfork.CommandRecord, error) {
	return c.wait(ctx, client.WaitLeader)
}

func (c *remoteCmd) WaitTree(ctx context.Context) (hostfork.CommandRecord, error) {
	return c.wait(ctx, client.WaitTree)
}

// TreeSeen is nil: a server's guardian reports to the server, and its
// word reaches this process only as the record.
func (c *remoteCmd) TreeSeen() <-chan struct{} { return nil }

// follow streams a command's stdout and stderr from offset 0 to this
// process's, until its tree has exited; the returned function waits until
// both are written out.
func follow(ctx context.Context, g *globals, b backend, id string) func() {
	var wg sync.WaitGroup
	for _, s := range []struct {
		stream string
		w      io.Writer
	}{{"stdout", g.out}, {"stderr", g.err}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd, err := b.Logs(ctx, id, hostfork.LogOptions{Stream: s.stream, Follow: true})
			if err == nil {
				_, err = io.Copy(s.w, rd)
				rd.Close()
			}
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(g.err, "hostfork: warning: following the %s of command %s: %s (see 'hostfork logs %s')\n", s.stream, id, errText(err), id)
			}
		}()
	}
	return wg.Wait
}

// Fork forks through the server (whose children are always detached).
func (r *remote) Fork(ctx context.Context, envPrefix string, o hostfork.ForkOptions) ([]hostfork.EnvRecord, error) {
	return r.Client.Fork(ctx, envPrefix, client.ForkRequest{Count: o.Count, Labels: o.Labels, TTL: api.Duration(o.TTL)})
}
