package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/watch"
	"github.com/habemus-papadum/hostfork/spec"
)

func (s *Server) ping(w http.ResponseWriter, r *http.Request) (any, error) {
	return client.Ping{OK: true, APIVersion: client.APIVersion}, nil
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) (any, error) {
	if s.cfg.Version == nil {
		return nil, fmt.Errorf("no version information: %w", hostfork.ErrUnsupported)
	}
	return s.cfg.Version(), nil
}

// count reads a query parameter that counts from 0 (absent: def); what
// says what it counts, for the message that names the fix.
func count(r *http.Request, name string, def int64, what string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, invalid("%s %q: give %s (0 or more)", name, v, what)
	}
	return n, nil
}

// flag reads a boolean query parameter: absent is def; 1/true/0/false.
func flag(r *http.Request, name string, def bool) (bool, error) {
	v, ok := r.URL.Query()[name]
	if !ok || len(v) == 0 {
		return def, nil
	}
	b, err := strconv.ParseBool(v[len(v)-1])
	if err != nil {
		return false, invalid("query %s=%q: use 1 or 0", name, v[len(v)-1])
	}
	return b, nil
}

func selector(r *http.Request) (hostfork.Selector, error) {
	var sel hostfork.Selector
	for _, l := range r.URL.Query()["label"] {
		t, err := hostfork.ParseSelector(l)
		if err != nil {
			return nil, err
		}
		sel = append(sel, t...)
	}
	return sel, nil
}

func stopOptions(r *http.Request) (hostfork.StopOptions, error) {
	var o hostfork.StopOptions
	if g := r.URL.Query().Get("grace"); g != "" {
		d, err := api.ParseDuration(g)
		if err != nil {
			return o, fmt.Errorf("query grace: %w", err)
		}
		o.Grace = d
		if d == 0 {
			o.Grace = -1 // grace=0: kill at once (hostfork stop --grace 0)
		}
	}
	ab, err := flag(r, "abandon", false)
	o.Abandon = ab
	if err != nil {
		return o, err
	}
	switch reason := hostfork.StopReason(r.URL.Query().Get("reason")); reason {
	case "", hostfork.ReasonUser, hostfork.ReasonOwnerExit:
		o.Reason = reason
	default:
		return o, invalid("reason %q: use user (the default) or owner-exit", reason)
	}
	return o, nil
}

func redact(r *http.Request, e hostfork.EnvRecord) (hostfork.EnvRecord, error) {
	show, err := flag(r, "show_env", false)
	if err != nil || show {
		return e, err
	}
	return hostfork.RedactEnv(e), nil
}

func (s *Server) listEnvs(w http.ResponseWriter, r *http.Request) (any, error) {
	sel, err := selector(r)
	if err != nil {
		return nil, err
	}
	f := hostfork.EnvFilter{Labels: sel, WithCommands: true}
	for _, st := range r.URL.Query()["state"] {
		switch es := hostfork.EnvState(st); es {
		case hostfork.EnvCreating, hostfork.EnvActive, hostfork.EnvStopping, hostfork.EnvStopped, hostfork.EnvFailed:
			f.States = append(f.States, es)
		default:
			return nil, invalid("state %q: use creating, active, stopping, stopped or failed", st)
		}
	}
	if f.Active, err = flag(r, "active", false); err != nil {
		return nil, err
	}
	if f.WithCommands, err = flag(r, "commands", true); err != nil {
		return nil, err
	}
	envs, err := s.h.Envs(r.Context(), f)
	if err != nil {
		return nil, err
	}
	for i := range envs {
		if envs[i], err = redact(r, envs[i]); err != nil {
			return nil, err
		}
	}
	return envs, nil
}

// envRecord reads an environment by id or prefix; a command id is 404.
func (s *Server) envRecord(r *http.Request, id string) (*hostfork.EnvRecord, error) {
	env, cmd, err := s.h.Status(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if env == nil {
		return nil, fmt.Errorf("%s is a command, not an environment (GET /v1/commands/%s): %w", cmd.ID, cmd.ID, hostfork.ErrNotFound)
	}
	return env, nil
}

func (s *Server) getEnv(w http.ResponseWriter, r *http.Request) (any, error) {
	env, err := s.envRecord(r, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return redact(r, *env)
}

// bounded checks that a spec for an environment made through the server
// outlives the request safely: an expiry (or until_stopped) is required and
// its owner-exit policy is detach, so it outlives the server and is found
// again as a record. at prefixes the field names in messages.
func bounded(sp *spec.Environment, at string) error {
	l := &sp.Lifetime
	if l.MaxRuntime == 0 && !l.UntilStopped {
		return invalid("an environment made through the server outlives the request: give %smax_runtime (e.g. \"20m\") or %suntil_stopped: true", at, at)
	}
	switch l.OwnerExit {
	case "":
		l.OwnerExit = spec.OwnerExitDetach
	case spec.OwnerExitDetach:
	default:
		return invalid("%sowner_exit %q: an environment made through the server is detached (drop owner_exit, or use detach)", at, l.OwnerExit)
	}
	return sp.Validate()
}

// createEnv creates an environment bounded like `run --detach`: an expiry
// (or until_stopped) is required and its owner-exit policy is detach, so it
// outlives the server and is found again as a record.
func (s *Server) createEnv(w http.ResponseWriter, r *http.Request) (any, error) {
	var sp spec.Environment
	if err := decode(w, r, &sp); err != nil {
		return nil, err
	}
	if err := bounded(&sp, "lifetime."); err != nil {
		return nil, err
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	p, err := s.h.Plan(ctx, sp)
	if err != nil {
		return nil, err
	}
	env, err := s.h.Create(ctx, p)
	if err != nil {
		return nil, err
	}
	return s.created(ctx, w, r, env.ID())
}

// created answers the record of the environment id just made, with its
// Location.
func (s *Server) created(ctx context.Context, w http.ResponseWriter, r *http.Request, id string) (any, error) {
	rec, _, err := s.h.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	e, err := redact(r, *rec)
	if err != nil {
		return nil, err
	}
	w.Header().Set("Location", "/v1/envs/"+e.ID)
	return e, nil
}

func (s *Server) stopEnv(w http.ResponseWriter, r *http.Request) (any, error) {
	o, err := stopOptions(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	rec, err := s.h.StopEnv(ctx, r.PathValue("id"), o)
	if err != nil {
		return nil, err
	}
	return redact(r, *rec)
}

// extendEnv moves the deadline. The move is not cut short by a client
// that leaves: once recorded, every enforcer must take it.
func (s *Server) extendEnv(w http.ResponseWriter, r *http.Request) (any, error) {
	var req api.DeadlineRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if _, err := s.envRecord(r, r.PathValue("id")); err != nil {
		return nil, err
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	rec, err := s.h.Extend(ctx, r.PathValue("id"), req)
	if err != nil {
		return nil, err
	}
	return redact(r, *rec)
}

// exportEnv runs the export under the request's context: a client that
// leaves aborts it, and the result records the partial copy.
func (s *Server) exportEnv(w http.ResponseWriter, r *http.Request) (any, error) {
	var req client.ExportRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if req.Tree == "" {
		return nil, invalid("tree is required (the name of one of the environment's trees)")
	}
	if (req.Destination != "" || req.Commit == "") && !filepath.IsAbs(req.Destination) {
		return nil, invalid("destination %q: give an absolute path that does not exist yet (or only commit, for a worktree tree)", req.Destination)
	}
	if _, err := s.envRecord(r, r.PathValue("id")); err != nil {
		return nil, err
	}
	return s.h.Export(r.Context(), r.PathValue("id"), req.Tree, req.Destination, hostfork.ExportOptions{Commit: req.Commit})
}

// checkCommand validates a command request (at prefixes field names in
// messages); an agent workload's admission defaults to fail.
func checkCommand(req *client.CommandRequest, at string) error {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return invalid("%sargv is required: the program and its arguments, e.g. [\"make\", \"test\"]", at)
	}
	for _, kv := range req.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !spec.ValidEnvName(k) {
			return invalid("%senv %q: write it as NAME=VALUE", at, kv)
		}
	}
	if !spec.ValidEnvPolicy(req.EnvPolicy) {
		return invalid("%senv_policy %q: use inherit, clean, host-shell or toolchain", at, req.EnvPolicy)
	}
	switch {
	case req.Stdin != "" && req.Stdin != "pipe":
		return invalid("%sstdin %q: use \"pipe\" (a stdin pipe that input writes to) or leave it out (/dev/null)", at, req.Stdin)
	case req.TTY && req.Stdin != "":
		return invalid("%sa tty is the command's input already: drop stdin", at)
	case !req.TTY && (req.Cols != 0 || req.Rows != 0):
		return invalid("%scols and rows size a terminal: they need tty", at)
	}
	switch req.Workload {
	case "":
		if req.Admit != "" {
			return invalid("%sadmit is only for workload \"agent\"", at)
		}
	case hostfork.WorkloadAgent:
		switch req.Admit {
		case "":
			req.Admit = hostfork.AdmitFail
		case hostfork.AdmitFail, hostfork.AdmitSkip:
		case hostfork.AdmitWait:
			return invalid("%sadmit \"wait\" is not offered over HTTP: use fail (429 when the host is full; retry) or skip", at)
		default:
			return invalid("%sadmit %q: use fail or skip", at, req.Admit)
		}
	default:
		return invalid("%sworkload %q: use \"agent\" or leave it out", at, req.Workload)
	}
	return nil
}

// detached fills a command from a request: output in files, owner-exit
// detach, stdin /dev/null unless a session (tty, stdin pipe) is asked for.
func detached(cmd *hostfork.Command, req *client.CommandRequest) {
	cmd.Cwd, cmd.EnvPolicy, cmd.EnvSet = req.Cwd, req.EnvPolicy, req.Env
	cmd.Labels, cmd.Purpose, cmd.Timeout = req.Labels, req.Purpose, req.Timeout.D()
	cmd.Workload, cmd.Admit = req.Workload, req.Admit
	cmd.TTY, cmd.Size = req.TTY, hostfork.TermSize{Cols: req.Cols, Rows: req.Rows}
	if req.Stdin == "pipe" {
		cmd.Stdin = hostfork.StdinPipe
	}
	cmd.Output = hostfork.OutputFiles
	cmd.OwnerExit = hostfork.OwnerExitDetach
}

// startCommand starts a detached command: output in files, owner-exit
// detach, stdin /dev/null, and a context that is never done, so the tree
// runs under its own bounds (the environment's deadline, its timeout) and
// outlives the request and the server.
func (s *Server) startCommand(w http.ResponseWriter, r *http.Request) (any, error) {
	var req client.CommandRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if err := checkCommand(&req, ""); err != nil {
		return nil, err
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	env, err := s.h.OpenEnv(ctx, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	cmd := env.Command(req.Argv...)
	detached(cmd, &req)
	start := time.Now()
	// A context whose Done is nil: the library arms no cancellation, so
	// the tree keeps the environment's bounds, not the request's.
	if err := cmd.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	s.launches.Observe(time.Since(start).Seconds())
	_, rec, err := s.h.Status(ctx, cmd.ID())
	if err != nil {
		return nil, err
	}
	w.Header().Set("Location", "/v1/commands/"+rec.ID)
	return rec, nil
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request) (any, error) {
	sel, err := selector(r)
	if err != nil {
		return nil, err
	}
	f := hostfork.CommandFilter{Labels: sel}
	if e := r.URL.Query().Get("env"); e != "" {
		env, err := s.envRecord(r, e)
		if err != nil {
			return nil, err
		}
		f.Env = env.ID
	}
	for _, st := range r.URL.Query()["state"] {
		switch cs := hostfork.CommandState(st); cs {
		case hostfork.CommandReserved, hostfork.CommandRunning, hostfork.CommandExited, hostfork.CommandFailed, hostfork.CommandUnverified:
			f.States = append(f.States, cs)
		default:
			return nil, invalid("state %q: use a record state: reserved, running, exited, failed or unverified (live=1 for what ps shows)", st)
		}
	}
	if f.Live, err = flag(r, "live", false); err != nil {
		return nil, err
	}
	if f.Brief, err = flag(r, "brief", false); err != nil {
		return nil, err
	}
	return s.h.Commands(r.Context(), f)
}

// commandRecord reads a command by id or prefix; an environment id is 404.
func (s *Server) commandRecord(r *http.Request, id string) (*hostfork.CommandRecord, error) {
	env, cmd, err := s.h.Status(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if cmd == nil {
		return nil, fmt.Errorf("%s is an environment, not a command (GET /v1/envs/%s): %w", env.ID, env.ID, hostfork.ErrNotFound)
	}
	return cmd, nil
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request) (any, error) {
	return s.commandRecord(r, r.PathValue("id"))
}

func (s *Server) openCommand(r *http.Request) (*hostfork.Command, error) {
	if _, err := s.commandRecord(r, r.PathValue("id")); err != nil {
		return nil, err
	}
	return s.h.OpenCommand(r.Context(), r.PathValue("id"))
}

// waitCommand blocks until the condition holds (the leader's exit, the
// tree's end), the output matches (for) or stalls (stalled), the timeout
// passes (504, cause timed_out), the client leaves (the request's
// context) or the server shuts down (503, cause closed). It answers a
// WaitOutcome: the record (its fields at the top level, so a reader of
// records reads it as one) with why the wait returned.
func (s *Server) waitCommand(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	cond := q.Get("condition")
	if cond != "" && cond != "leader" && cond != "tree" {
		return nil, invalid("condition %q: use leader or tree", cond)
	}
	o := hostfork.WaitOptions{Tree: cond != "leader", Stream: q.Get("stream")}
	if v := q.Get("for"); v != "" {
		re, err := regexp.Compile(v)
		if err != nil {
			return nil, invalid("for %q is not a valid regular expression (Go RE2 syntax): %v", v, err)
		}
		o.For = re
	}
	var err error
	if o.Since, err = count(r, "since", 0, "a byte offset"); err != nil {
		return nil, err
	}
	var timeout time.Duration
	for name, d := range map[string]*time.Duration{"stalled": &o.Stalled, "timeout": &timeout} {
		if v := q.Get(name); v != "" {
			n, err := api.ParseDuration(v)
			if err != nil || n <= 0 {
				return nil, invalid("%s %q: give a positive duration such as 30s", name, v)
			}
			*d = n
		}
	}
	forOutput := o.For != nil || o.Stalled > 0
	if forOutput {
		if cond == "leader" {
			return nil, invalid("condition leader is for a plain wait: a wait for output (for, stalled) ends when the tree does (condition tree); drop one")
		}
		o.Tree = false
	}
	c, err := s.openCommand(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.streamContext(r)
	defer cancel()
	if timeout > 0 {
		var tcancel context.CancelFunc
		ctx, tcancel = context.WithTimeout(ctx, timeout)
		defer tcancel()
	}
	out, err := c.WaitUntil(ctx, o)
	if err != nil {
		switch {
		case s.streams.Err() != nil && r.Context().Err() == nil:
			return nil, fmt.Errorf("the server is shutting down; wait again: %w", hostfork.ErrClosed)
		case timeout > 0 && errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			return nil, fmt.Errorf("the wait's timeout (%s) passed; command %s runs on: %w", timeout, c.ID(), hostfork.ErrTimedOut)
		}
		return nil, err
	}
	return out, nil
}

// signalBody accepts the signal as a string (name or number) or a number.
type signalBody struct {
	Signal json.RawMessage `json:"signal"`
}

func parseSignal(raw json.RawMessage) (syscall.Signal, error) {
	if len(raw) == 0 {
		return 0, invalid("signal is required: a name (TERM, SIGKILL) or a number")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, invalid("signal %s: give a name (TERM, SIGKILL) or a number", raw)
		}
		s = strconv.Itoa(n)
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, invalid("signal %d is out of range (1-64)", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := linux.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, invalid("signal %q: unknown name (use e.g. TERM, INT, HUP, KILL, USR1)", s)
}

func (s *Server) signalCommand(w http.ResponseWriter, r *http.Request) (any, error) {
	var b signalBody
	if err := decode(w, r, &b); err != nil {
		return nil, err
	}
	sig, err := parseSignal(b.Signal)
	if err != nil {
		return nil, err
	}
	c, err := s.openCommand(r)
	if err != nil {
		return nil, err
	}
	if err := c.Signal(sig); err != nil {
		return nil, err
	}
	return s.commandRecord(r, c.ID())
}

func (s *Server) stopCommand(w http.ResponseWriter, r *http.Request) (any, error) {
	o, err := stopOptions(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	return s.h.StopCommand(ctx, r.PathValue("id"), o)
}

// logs streams a command's artifact from a byte offset, flushing each
// chunk as it is read.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	o := hostfork.LogOptions{Stream: q.Get("stream")}
	if o.Stream != "" && o.Stream != "stdout" && o.Stream != "stderr" {
		return nil, invalid("stream %q: use stdout or stderr", o.Stream)
	}
	var err error
	if o.Offset, err = count(r, "offset", 0, "a byte offset"); err != nil {
		return nil, err
	}
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, invalid("tail %q: give a number of lines (1 or more)", v)
		}
		if o.Offset > 0 {
			return nil, invalid("give offset or tail, not both")
		}
		o.Tail = n
	}
	if o.Follow, err = flag(r, "follow", false); err != nil {
		return nil, err
	}
	c, err := s.openCommand(r)
	if err != nil {
		return nil, err
	}
	if o.Tail > 0 {
		if o.Offset, err = c.TailOffset(r.Context(), o.Stream, o.Tail); err != nil {
			return nil, err
		}
	}
	ctx, cancel := s.streamContext(r)
	defer cancel()
	rec := c.Record()
	path := rec.StdoutPath
	if o.Stream == "stderr" {
		path = rec.StderrPath
	}
	// Open it first: a missing artifact is an error answer, not a stream.
	rd, err := c.Logs(ctx, hostfork.LogOptions{Stream: o.Stream, Offset: o.Offset})
	if err != nil {
		return nil, err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set(client.LogOffsetHeader, strconv.FormatInt(o.Offset, 10))
	w.WriteHeader(http.StatusOK)
	fl := http.NewResponseController(w)
	_ = fl.Flush()
	buf := make([]byte, 32<<10)
	// send copies rd to its end; false when the client is gone.
	send := func(rd io.ReadCloser) (bool, error) {
		defer rd.Close()
		for {
			n, rerr := rd.Read(buf)
			if n > 0 {
				o.Offset += int64(n)
				if _, werr := w.Write(buf[:n]); werr != nil {
					return false, nil
				}
				_ = fl.Flush()
			}
			if errors.Is(rerr, io.EOF) {
				return true, nil
			}
			if rerr != nil {
				return true, rerr
			}
		}
	}
	var wake <-chan struct{}
	var treeDone chan struct{}
	if o.Follow {
		// A signal (coalesced) when the file is written, and at least
		// every 100 ms.
		wake = watch.New(path).Changes(ctx, 100*time.Millisecond)
		treeDone = make(chan struct{})
		go func() {
			// The tree's end (or a tree whose end can't be verified, as
			// the library's follow) ends the follow; any other failure
			// leaves it to the client's leaving.
			if _, err := c.WaitTree(ctx); ctx.Err() == nil && (err == nil || errors.Is(err, hostfork.ErrUnverified)) {
				close(treeDone)
			}
		}()
	}
	last := !o.Follow
	for {
		ok, rerr := send(rd)
		switch {
		case !ok:
			return nil, nil
		case rerr != nil:
			// A read error, like the client leaving or a shutdown below,
			// cuts the connection without the stream's end, so a client
			// can't take a partial stream for the whole one: it resumes
			// from the bytes it has.
			s.cfg.Logf("logs of %s: %v", c.ID(), rerr)
			panic(http.ErrAbortHandler)
		case last:
			// EOF after the tree's end: all of it, the one clean end.
			return nil, nil
		}
		select {
		case <-wake:
		case <-treeDone:
			// What the tree wrote is in the file now: read to its end.
			last = true
		case <-ctx.Done():
			panic(http.ErrAbortHandler)
		}
		if rd, err = c.Logs(ctx, hostfork.LogOptions{Stream: o.Stream, Offset: o.Offset}); err != nil {
			s.cfg.Logf("logs of %s: %v", c.ID(), err)
			panic(http.ErrAbortHandler)
		}
	}
}

// events streams the event log as NDJSON, one event per line, flushed per
// event; it follows unless follow=0.
func (s *Server) events(w http.ResponseWriter, r *http.Request) (any, error) {
	since, err := count(r, "since", 0, "the last sequence seen")
	if err != nil {
		return nil, err
	}
	follow, err := flag(r, "follow", true)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.streamContext(r)
	defer cancel()
	streamNDJSON(s, ctx, w, "events", s.h.Events(ctx, since, follow))
	return nil, nil
}

// streamNDJSON writes each value of seq as one JSON line, flushed, until
// the sequence ends, fails (logged unless the client left) or the client
// stops reading.
func streamNDJSON[T any](s *Server, ctx context.Context, w http.ResponseWriter, what string, seq iter.Seq2[T, error]) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl := http.NewResponseController(w)
	_ = fl.Flush()
	enc := json.NewEncoder(w)
	for v, err := range seq {
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logf("%s: %v", what, err)
			}
			return
		}
		if enc.Encode(v) != nil {
			return
		}
		_ = fl.Flush()
	}
}

func (s *Server) capacity(w http.ResponseWriter, r *http.Request) (any, error) {
	return s.h.Capacity(r.Context())
}

func (s *Server) pause(paused bool) func(http.ResponseWriter, *http.Request) (any, error) {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		ctx, cancel := mutationContext(r)
		defer cancel()
		if err := s.h.SetPaused(ctx, paused); err != nil {
			return nil, err
		}
		p, err := s.h.Paused(ctx)
		return client.PauseState{Paused: p}, err
	}
}

func (s *Server) reap(w http.ResponseWriter, r *http.Request) (any, error) {
	ctx, cancel := mutationContext(r)
	defer cancel()
	return s.h.Reap(ctx)
}

func (s *Server) usage(w http.ResponseWriter, r *http.Request) (any, error) {
	return s.h.Usage(r.Context())
}

func (s *Server) doctor(w http.ResponseWriter, r *http.Request) (any, error) {
	if s.cfg.Doctor == nil {
		return nil, fmt.Errorf("doctor is not available in this server: %w", hostfork.ErrUnsupported)
	}
	return s.cfg.Doctor(r.Context())
}

// resolve says what an id or unique prefix names.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) (any, error) {
	kind, id, err := s.h.Resolve(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return client.Resolved{Kind: kind, ID: id}, nil
}

// plan resolves a spec against this host and creates nothing (as
// 'hostfork plan --json'). Unlike POST /v1/envs it needs no lifetime: a
// plan is only read.
func (s *Server) plan(w http.ResponseWriter, r *http.Request) (any, error) {
	var sp spec.Environment
	if err := decode(w, r, &sp); err != nil {
		return nil, err
	}
	if err := sp.Validate(); err != nil {
		return nil, err
	}
	return s.h.Plan(r.Context(), sp)
}

// runBody is the body of POST /v1/runs (client.RunRequest, with the
// environment's spec typed for decoding).
type runBody struct {
	Env     spec.Environment      `json:"env"`
	Command client.CommandRequest `json:"command"`
}

// run creates an environment with its first command, as 'hostfork run
// --detach' does: the environment is bounded (an expiry or until_stopped,
// owner-exit detach) and stops when the command's tree has exited. A
// program that can be known missing is refused before anything is made.
func (s *Server) run(w http.ResponseWriter, r *http.Request) (any, error) {
	var b runBody
	if err := decode(w, r, &b); err != nil {
		return nil, err
	}
	if err := bounded(&b.Env, "env.lifetime."); err != nil {
		return nil, err
	}
	req := &b.Command
	if err := checkCommand(req, "command."); err != nil {
		return nil, err
	}
	if b.Env.View.Empty() && !b.Env.MayChangePath() && !setsPath(req) {
		if _, err := hostfork.LookPath(req.Argv[0], nil); err != nil {
			return nil, err
		}
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	p, err := s.h.Plan(ctx, b.Env)
	if err != nil {
		return nil, err
	}
	cmd := s.h.Command(req.Argv...)
	detached(cmd, req)
	start := time.Now()
	// As for a started command: a context whose Done is nil, so the
	// tree keeps the environment's bounds, not the request's.
	env, err := s.h.Run(context.WithoutCancel(ctx), p, cmd)
	if err != nil {
		return nil, err
	}
	s.launches.Observe(time.Since(start).Seconds())
	return s.created(ctx, w, r, env.ID())
}

// setsPath reports whether a request may give its command another PATH
// than the server's.
func setsPath(req *client.CommandRequest) bool {
	if req.EnvPolicy != "" && req.EnvPolicy != spec.EnvInherit {
		return true
	}
	return slices.ContainsFunc(req.Env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") })
}

func (s *Server) btrfsSizes(w http.ResponseWriter, r *http.Request) (any, error) {
	return s.h.BtrfsSizes(r.Context())
}

func (s *Server) gc(w http.ResponseWriter, r *http.Request) (any, error) {
	var req client.GCRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	o := hostfork.GCOptions{DryRun: req.DryRun, Force: req.Force, DeleteBranches: req.DeleteBranches}
	for _, x := range []struct {
		d   *api.Duration
		dst **time.Duration
	}{{req.RetainTrees, &o.RetainTrees}, {req.RetainEvidence, &o.RetainEvidence}} {
		if x.d != nil {
			if x.d.D() < 0 {
				return nil, invalid("a retention is a duration of 0 or more")
			}
			d := x.d.D()
			*x.dst = &d
		}
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	return s.h.GC(ctx, o)
}

func (s *Server) baselines(w http.ResponseWriter, r *http.Request) (any, error) {
	return s.h.Baselines(r.Context())
}

func (s *Server) addBaseline(w http.ResponseWriter, r *http.Request) (any, error) {
	var req client.BaselineRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if req.Name == "" {
		return nil, invalid("name is required")
	}
	if !filepath.IsAbs(req.Path) {
		return nil, invalid("path %q: give an absolute path on the server's host", req.Path)
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	b, err := s.h.AddBaseline(ctx, req.Name, req.Path)
	if err != nil {
		return nil, err
	}
	w.Header().Set("Location", "/v1/baselines/"+b.Name)
	return b, nil
}

func (s *Server) removeBaseline(w http.ResponseWriter, r *http.Request) (any, error) {
	ctx, cancel := mutationContext(r)
	defer cancel()
	name := r.PathValue("name")
	if err := s.h.RemoveBaseline(ctx, name); err != nil {
		return nil, err
	}
	return client.Removed{Name: name, Removed: true}, nil
}

// forkEnv forks an environment into detached children (they outlive the
// server, like the environments it creates).
func (s *Server) forkEnv(w http.ResponseWriter, r *http.Request) (any, error) {
	var req client.ForkRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	if _, err := s.envRecord(r, r.PathValue("id")); err != nil {
		return nil, err
	}
	ctx, cancel := mutationContext(r)
	defer cancel()
	recs, err := s.h.Fork(ctx, r.PathValue("id"), hostfork.ForkOptions{Count: req.Count, Labels: req.Labels, TTL: time.Duration(req.TTL), OwnerExit: spec.OwnerExitDetach})
	if err != nil {
		return nil, err
	}
	out := make([]hostfork.EnvRecord, 0, len(recs))
	for _, rec := range recs {
		e, err := redact(r, rec)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}
