package hostfork

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/engine"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/watch"
)

// Command is one command tree in an environment. Set the exported fields,
// then Start. It is like exec.Cmd, except that Wait returns at the
// leader's exit and WaitTree once the whole tree is gone and recorded;
// and that a Command can be reopened by another process (Host.OpenCommand)
// to wait for it, follow its output, signal or stop it.
type Command struct {
	Argv []string
	// Cwd is the working directory ("" = the caller's), resolved inside
	// the environment's view.
	Cwd string
	// Env is the environment, used as given (with EnvSet applied); nil
	// means the one EnvPolicy resolves.
	Env []string
	// EnvPolicy is inherit, clean, host-shell or toolchain; "" means the
	// environment's env_policy, else inherit. Every policy removes
	// inherited Git redirections (GIT_DIR, GIT_WORK_TREE, ...).
	EnvPolicy string
	// EnvSet holds explicit K=V variables applied last; they may set Git
	// redirections. Their values are not recorded (their names are).
	EnvSet []string
	// Output is files (default), pipe or inherit.
	Output OutputMode
	// Stdin is the workload's standard input; nil means /dev/null. An
	// *os.File (a pipe, a file, a terminal) is passed as it is; any other
	// reader is copied through a pipe.
	Stdin io.Reader
	// Stdout and Stderr receive the streamed output in pipe mode (the
	// files still get everything); with OutputInherit, *os.File values are
	// the workload's own descriptors (nil: the caller's).
	Stdout, Stderr io.Writer
	// Foreground makes the workload the terminal's foreground job (its
	// Stdin is the terminal).
	Foreground bool
	// TTY gives the command a pseudo-terminal of Size (80x24 if zero),
	// held by its guardian: the workload's controlling terminal, its
	// output the command's log (stdout file). Attach, Send and Resize
	// reach it from any process (docs/sessions.md). Stdin must be nil.
	TTY     bool
	Size    TermSize
	Purpose string
	Labels  map[string]string
	// OwnerExit overrides the environment's owner-exit policy for this
	// command: "stop" ends the tree when the starting process exits,
	// "detach" lets it run on under the environment's deadline.
	OwnerExit string
	// Workload "agent" makes the command take part in admission with
	// Admit (wait, the default for agents; fail; skip). OnAdmissionWait
	// is called once if the command has to wait.
	Workload        string
	Admit           string
	OnAdmissionWait func(reason string)
	// CaptureOutput keeps the streamed output (pipe mode) so that Capture
	// can return it; Capture sets it itself when it starts the command.
	// CaptureLimit bounds the bytes kept per stream (default MaxCapture);
	// the artifact files keep everything. Without it, nothing is buffered.
	CaptureOutput bool
	CaptureLimit  int
	// Timeout stops the tree (reason "timeout") this long after it
	// started: SIGTERM, then the environment's grace, then SIGKILL. It
	// never extends the environment's deadline. Zero: none.
	Timeout time.Duration
	// WaitDelay is the grace the tree gets after the context given to
	// Start is done (as exec.Cmd.WaitDelay): SIGTERM, then this long, then
	// SIGKILL. Zero: the environment's grace.
	WaitDelay time.Duration

	h       *Host
	envID   string
	mu      sync.Mutex
	started bool
	r       *engine.Running
	id      string
	rec     *CommandRecord // a reopened command's last read record
	stdinW  *os.File       // the copy pipe of a non-file Stdin
	stdinR  *os.File
}

// ID is the command's id (after Start).
func (c *Command) ID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

// Record returns the command's last known record; the zero record before
// Start.
func (c *Command) Record() CommandRecord {
	c.mu.Lock()
	r, rec := c.r, c.rec
	c.mu.Unlock()
	switch {
	case r != nil:
		return r.Record()
	case rec != nil:
		return *rec
	}
	return CommandRecord{}
}

// spec converts the handle's fields for the engine.
func (c *Command) spec() (*engine.CommandSpec, error) {
	if c.h == nil {
		return nil, fmt.Errorf("hostfork: Command was not made by Env.Command: %w", api.ErrInvalid)
	}
	cs := &engine.CommandSpec{
		Argv: c.Argv, Cwd: c.Cwd, Env: c.Env, EnvPolicy: c.EnvPolicy, EnvSet: c.EnvSet,
		Output: c.Output, Stdout: c.Stdout, Stderr: c.Stderr, Foreground: c.Foreground,
		Purpose: c.Purpose, Labels: c.Labels, OwnerExit: c.OwnerExit, Workload: c.Workload,
		Admit: c.Admit, OnAdmissionWait: c.OnAdmissionWait, Capture: c.CaptureOutput, CaptureLimit: c.CaptureLimit,
		Timeout: c.Timeout,
	}
	if c.TTY {
		cs.Session, cs.TTYCols, cs.TTYRows = "tty", c.Size.Cols, c.Size.Rows
		if c.Stdin != nil {
			return nil, fmt.Errorf("hostfork: a TTY command's input is its terminal: leave Stdin nil: %w", api.ErrInvalid)
		}
	}
	if c.Stdin == StdinPipe {
		cs.Session = "stdin"
		return cs, nil
	}
	switch in := c.Stdin.(type) {
	case nil:
	case *os.File:
		cs.Stdin = in
	default:
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		c.stdinR, c.stdinW = r, w
		cs.Stdin = r
		go func() {
			_, _ = io.Copy(w, in)
			w.Close()
		}()
	}
	return cs, nil
}

// closeStdin closes this process's copy of the workload's stdin pipe once
// the guardian holds it.
func (c *Command) closeStdin() {
	if c.stdinR != nil {
		c.stdinR.Close()
		c.stdinR = nil
	}
}

// Start registers the command, starts its guardian at the gate, records
// the guardian's identity, then releases it. Nothing of the workload runs
// before its identity is registered (committed: every process sees it and
// no process crash loses it; the result's commit syncs it to disk, see
// docs/decisions.md, entry 62); a failure before release leaves no
// process and a settled ledger. Cancelling ctx later stops the
// whole tree (reason "cancelled", grace WaitDelay), as
// exec.CommandContext kills its process; a ctx that is never done (e.g.
// context.Background()) leaves the tree to its own bounds.
func (c *Command) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return fmt.Errorf("hostfork: Command already started: %w", api.ErrInvalid)
	}
	cs, err := c.spec()
	if err != nil {
		return err
	}
	r, err := c.h.e.Start(ctx, c.envID, cs)
	c.closeStdin()
	if err != nil {
		if c.stdinW != nil {
			c.stdinW.Close()
		}
		return err
	}
	c.attach(ctx, r)
	return nil
}

// attach binds a launch to the handle and arms the context's cancellation.
func (c *Command) attach(ctx context.Context, r *engine.Running) {
	// The id from the locked record: Running.ID reads the record that the
	// launch's watcher replaces, without its lock.
	id := r.Record().ID
	c.started, c.r, c.id = true, r, id
	if ctx.Done() == nil {
		return
	}
	grace := c.WaitDelay
	c.h.bg.Add(1)
	go func() {
		defer c.h.bg.Done()
		select {
		case <-ctx.Done():
			opts := StopOptions{Reason: ReasonCancelled, Grace: grace}
			_, _ = c.h.e.StopCommand(context.Background(), id, opts.engine())
		case <-r.TreeDone():
		case <-c.h.closing: // a stop already under way is finished first
		}
	}()
}

// Wait waits for the leader process to exit and returns the record at
// that point: the leader's exit code or signal, and the stop reason if
// hostfork stopped it. Descendants may still be running (see WaitTree).
// After Host.Close it returns ErrClosed.
func (c *Command) Wait(ctx context.Context) (CommandRecord, error) {
	r, id, err := c.launched()
	if err != nil {
		return CommandRecord{}, err
	}
	if r != nil {
		if err := c.await(ctx, r.LeaderDone()); err != nil {
			return CommandRecord{}, err
		}
		return r.Record(), nil
	}
	return c.poll(ctx, id, func(rec *CommandRecord) bool {
		return rec.Final() || rec.LeaderState == api.PhaseExited || rec.LeaderState == api.PhaseUnknown
	})
}

// WaitTree waits until the whole tree is gone and its record is final and
// durable. A tree whose exit can't be verified returns its record with an
// error matching ErrUnverified; a result that could not be recorded (a
// full store) returns the observed record with that error. After
// Host.Close it returns ErrClosed.
func (c *Command) WaitTree(ctx context.Context) (CommandRecord, error) {
	r, id, err := c.launched()
	if err != nil {
		return CommandRecord{}, err
	}
	if r != nil {
		if err := c.await(ctx, r.TreeDone()); err != nil {
			return CommandRecord{}, err
		}
		rec := r.Record()
		if err := r.RecordErr(); err != nil {
			return rec, err
		}
		if !rec.Final() {
			return rec, fmt.Errorf("command %s: its tree's exit could not be verified (%s): %w", rec.ID, rec.TreeEvidence, api.ErrUnverified)
		}
		return rec, nil
	}
	rec, err := c.poll(ctx, id, func(rec *CommandRecord) bool { return rec.Final() || rec.State == api.CommandUnverified })
	if err == nil && !rec.Final() {
		return rec, fmt.Errorf("command %s: its tree's exit can't be verified (%s): %w", rec.ID, rec.TreeEvidence, api.ErrUnverified)
	}
	return rec, err
}

// TreeSeen is closed, for a command this process launched, once its
// guardian has reported that no process of its tree is left: before the
// result is recorded, which WaitTree then waits for. It is nil before
// Start and for a command another process launched, and never closed
// when the guardian ends without that report. It tells a
// tree that ended with its leader from one that left processes behind
// without waiting for the record's commit.
func (c *Command) TreeSeen() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.r == nil {
		return nil
	}
	return c.r.TreeSeen()
}

// launched is the handle's launch in this process (nil for a command
// another process started) and its id; an error before Start.
func (c *Command) launched() (*engine.Running, string, error) {
	c.mu.Lock()
	r, id, started := c.r, c.id, c.started || c.rec != nil
	c.mu.Unlock()
	if !started {
		return nil, "", fmt.Errorf("hostfork: Command not started: %w", api.ErrInvalid)
	}
	return r, id, nil
}

// await waits for done, ctx or the Host's Close (ErrClosed).
func (c *Command) await(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.h.e.Closed():
		return api.ErrClosed
	}
}

// poll waits for a command another process started: it reads (and
// settles) the record whenever the guardian may have written something —
// its receipt changed (inotify), the guardian exited (its pidfd) — or at
// the latest every 250 ms.
func (c *Command) poll(ctx context.Context, id string, done func(*CommandRecord) bool) (CommandRecord, error) {
	w := watch.New()
	defer w.Close()
	for {
		rec, err := c.h.e.Command(ctx, id)
		if err != nil {
			select {
			case <-c.h.e.Closed():
				return CommandRecord{}, api.ErrClosed
			default:
				return CommandRecord{}, err
			}
		}
		c.mu.Lock()
		c.rec = rec
		c.mu.Unlock()
		if done(rec) {
			return *rec, nil
		}
		if err := c.waitChange(ctx, w, rec); err != nil {
			return CommandRecord{}, err
		}
	}
}

// waitChange blocks until the command's receipt is written, its guardian
// exits, 250 ms pass, ctx ends (its error) or the Host is closed
// (ErrClosed).
func (c *Command) waitChange(ctx context.Context, w *watch.Watcher, rec *CommandRecord) error {
	var fds []int
	if rec.Guardian != nil {
		if p, err := linux.OpenVerified(linux.Identity{BootID: rec.Guardian.BootID, PID: rec.Guardian.PID, StartTime: rec.Guardian.StartTime}); err == nil {
			defer p.Close()
			fds = append(fds, p.Fd())
		}
	}
	if rec.Dir != "" {
		// The receipt is written in place (it is registered by inode), so
		// one watch serves the whole wait once the file is named.
		w.Add(rec.Dir + "/receipt")
	}
	err := w.Wait(ctx, c.h.e.Closed(), 250*time.Millisecond, fds...)
	if errors.Is(err, watch.ErrDone) {
		return api.ErrClosed
	}
	return err
}

// Signal sends sig to the leader process only (see StopTree for the whole
// tree). For a reopened command the leader's identity is verified through
// a pidfd first.
func (c *Command) Signal(sig syscall.Signal) error {
	c.mu.Lock()
	r, rec := c.r, c.rec
	c.mu.Unlock()
	if r != nil {
		return r.Signal(sig)
	}
	if rec == nil {
		return fmt.Errorf("hostfork: Command not started: %w", api.ErrInvalid)
	}
	fresh, err := c.h.e.Command(context.Background(), rec.ID)
	if err != nil {
		return err
	}
	if fresh.Workload == nil || fresh.LeaderState != api.PhaseLive {
		return fmt.Errorf("command %s: its leader is not running (%s): %w", rec.ID, fresh.LeaderState, api.ErrNotFound)
	}
	err = linux.SignalVerified(linux.Identity{BootID: fresh.Workload.BootID, PID: fresh.Workload.PID, StartTime: fresh.Workload.StartTime}, sig)
	if errors.Is(err, linux.ErrNoProcess) || errors.Is(err, linux.ErrIdentityMismatch) {
		return fmt.Errorf("command %s: its leader is gone: %w", rec.ID, api.ErrNotFound)
	}
	return err
}

// StopTree stops the whole command tree (see Host.StopCommand) and returns
// the final record.
func (c *Command) StopTree(ctx context.Context, opts StopOptions) (CommandRecord, error) {
	id := c.ID()
	if id == "" {
		return CommandRecord{}, fmt.Errorf("hostfork: Command not started: %w", api.ErrInvalid)
	}
	rec, err := c.h.e.StopCommand(ctx, id, opts.engine())
	c.mu.Lock()
	r := c.r
	if r == nil && rec != nil {
		c.rec = rec
	}
	c.mu.Unlock()
	if r != nil {
		select {
		case <-r.TreeDone():
			return r.Record(), err
		case <-ctx.Done():
		}
	}
	if rec == nil {
		return CommandRecord{}, err
	}
	return *rec, err
}

// Capture starts the command in pipe mode (if not started), waits for its
// leader, and returns the captured output: at most CaptureLimit bytes per
// stream. The first validated workload exit starts a fixed 200 ms final
// drain, which output can't extend, so a descendant that keeps a pipe open
// can't withhold the result. Each stream reports complete, incomplete or
// failed; an incomplete capture leaves a capture receipt beside the
// artifacts, and CaptureResult.Text/JSON refuse it (ErrIncompleteCapture).
// Descendants are not stopped to get EOF: use WaitTree or StopTree.
func (c *Command) Capture(ctx context.Context) (*CaptureResult, error) {
	c.mu.Lock()
	if !c.started {
		c.Output = OutputPipe
		c.CaptureOutput = true
		c.mu.Unlock()
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		c.mu.Lock()
	}
	r := c.r
	c.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("hostfork: Capture needs a command this process started with Capture: %w", api.ErrInvalid)
	}
	return r.Capture(ctx)
}

// OpenCommand returns a handle on an existing command (by id or unique
// prefix), also one started by another process (a restarted orchestrator):
// its Wait, WaitTree, Signal, StopTree and Logs work. Its exported fields
// are filled from the record (changing them changes nothing).
func (h *Host) OpenCommand(ctx context.Context, idPrefix string) (*Command, error) {
	id, err := h.resolveAs(ctx, idPrefix, "command", "is an environment, not a command", api.ErrNotFound)
	if err != nil {
		return nil, err
	}
	rec, err := h.e.Command(ctx, id)
	if err != nil {
		return nil, err
	}
	return h.commandHandle(rec), nil
}

func (h *Host) commandHandle(rec *CommandRecord) *Command {
	c := &Command{Argv: rec.Argv, Cwd: rec.Cwd, Output: rec.Output, Purpose: rec.Purpose, Labels: rec.Labels,
		Timeout: rec.Timeout.D(), h: h, envID: rec.Env, id: rec.ID, rec: rec}
	if r := h.e.Running(rec.ID); r != nil {
		c.r, c.started = r, true
	}
	return c
}

// ExitStatus is the shell-style status of a record: the exit code, or
// 128+signal. ok is false while the leader's status is unknown.
func ExitStatus(r CommandRecord) (status int, ok bool) { return r.ExitStatus() }
