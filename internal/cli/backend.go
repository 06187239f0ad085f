package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

// backend is what the verbs call: the library in this process (local, a
// *hostfork.Host) or a running 'hostfork serve' (remote, with --host or
// $HOSTFORK_HOST, through package client). Both speak the api types, so
// each verb's code, its output and its exit codes exist once. Most
// methods are *hostfork.Host's own; the others (Logs, Create, Run, Start)
// are what a verb needs from a handle, without one.
type backend interface {
	Close() error
	// Where names the store or the server, for messages.
	Where() string

	Resolve(ctx context.Context, idPrefix string) (kind, id string, err error)
	Status(ctx context.Context, idPrefix string) (*hostfork.EnvRecord, *hostfork.CommandRecord, error)
	Envs(ctx context.Context, f hostfork.EnvFilter) ([]hostfork.EnvRecord, error)
	Commands(ctx context.Context, f hostfork.CommandFilter) ([]hostfork.CommandRecord, error)
	Events(ctx context.Context, since int64, follow bool) iter.Seq2[hostfork.Event, error]
	// Logs reads a command's output artifact (by its whole id).
	Logs(ctx context.Context, commandID string, o hostfork.LogOptions) (io.ReadCloser, error)
	// WaitUntil waits for a command (by its whole id) as o says, for at
	// most timeout (0: no bound; past it an error matching ErrTimedOut).
	WaitUntil(ctx context.Context, commandID string, o hostfork.WaitOptions, timeout time.Duration) (hostfork.WaitOutcome, error)
	// SessionOf is a command's session (by its whole id), as attach,
	// send and resize reach it.
	SessionOf(ctx context.Context, commandID string) (sessionCmd, error)

	Plan(ctx context.Context, s spec.Environment) (*hostfork.Plan, error)
	// Create makes the planned environment and returns its record.
	Create(ctx context.Context, p *hostfork.Plan) (*hostfork.EnvRecord, error)
	// Run makes the planned environment with l as its first command (the
	// environment stops when its tree has exited); Start starts l in an
	// existing environment.
	Run(ctx context.Context, p *hostfork.Plan, l *launchReq) (launched, error)
	Start(ctx context.Context, envPrefix string, l *launchReq) (launched, error)
	StopEnv(ctx context.Context, idPrefix string, o hostfork.StopOptions) (*hostfork.EnvRecord, error)
	StopCommand(ctx context.Context, idPrefix string, o hostfork.StopOptions) (*hostfork.CommandRecord, error)
	Export(ctx context.Context, envPrefix, tree, dest string, o hostfork.ExportOptions) (*hostfork.ExportResult, error)
	Extend(ctx context.Context, idPrefix string, o hostfork.ExtendOptions) (*hostfork.EnvRecord, error)
	// Files of an environment's view (cp, ls).
	OpenFile(ctx context.Context, envPrefix, name string) (io.ReadCloser, error)
	WriteFile(ctx context.Context, envPrefix, name string, src io.Reader, perm os.FileMode) (hostfork.DirEntry, error)
	Mkdir(ctx context.Context, envPrefix, name string, perm os.FileMode) error
	Stat(ctx context.Context, envPrefix, name string) (hostfork.DirEntry, error)
	ReadDir(ctx context.Context, envPrefix, name string, depth int) ([]hostfork.DirEntry, error)
	Fork(ctx context.Context, envPrefix string, o hostfork.ForkOptions) ([]hostfork.EnvRecord, error)

	Capacity(ctx context.Context) (*hostfork.CapacityReport, error)
	SetPaused(ctx context.Context, paused bool) error
	Reap(ctx context.Context) (*hostfork.ReapReport, error)
	Usage(ctx context.Context) (*hostfork.Usage, error)
	BtrfsSizes(ctx context.Context) ([]hostfork.BtrfsSize, error)
	GC(ctx context.Context, o hostfork.GCOptions) (*hostfork.GCReport, error)
	AddBaseline(ctx context.Context, name, path string) (*hostfork.Baseline, error)
	Baselines(ctx context.Context) ([]*hostfork.Baseline, error)
	RemoveBaseline(ctx context.Context, name string) error
	RecaptureHostShell(ctx context.Context) error
}

// launched is a started command as run and exec follow it in the
// foreground: *hostfork.Command in this process, a command of the server
// through the API.
type launched interface {
	ID() string
	Record() hostfork.CommandRecord
	Signal(sig syscall.Signal) error
	StopTree(ctx context.Context, o hostfork.StopOptions) (hostfork.CommandRecord, error)
	Wait(ctx context.Context) (hostfork.CommandRecord, error)
	WaitTree(ctx context.Context) (hostfork.CommandRecord, error)
	// TreeSeen is the guardian's word that the tree is gone, before its
	// record is written; nil when this process can't hear it.
	TreeSeen() <-chan struct{}
}

// launchReq is one command to launch, as the flags of run and exec say.
type launchReq struct {
	argv      []string
	cwd       string
	purpose   string
	labels    map[string]string
	timeout   time.Duration
	output    hostfork.OutputMode
	envPolicy string
	envSet    []string
	// ownerExit is the command's own owner-exit policy ("": the
	// environment's).
	ownerExit string
	// stdin is passed through (nil: /dev/null); only in this process.
	stdin           *os.File
	workload, admit string
	onAdmissionWait func(reason string)
	// session is "tty" or "stdin" (a stdin pipe), with the terminal's
	// size ("" none; docs/sessions.md).
	session string
	size    hostfork.TermSize
}

// sessionCmd is a command's session: *hostfork.Command in this process
// (through its guardian's socket), or through a server's API.
type sessionCmd interface {
	Send(ctx context.Context, p []byte) error
	CloseStdin(ctx context.Context) error
	Resize(ctx context.Context, cols, rows uint16) error
	Attach(ctx context.Context, o hostfork.AttachOptions) (attached, error)
}

// attached is a client attached to a session (*hostfork.Session, or
// client.Session through a server's WebSocket).
type attached interface {
	io.ReadWriter
	TTY() bool
	Resize(cols, rows uint16) error
	Close() error
	// Exit is the command's record once Read returned io.EOF (the leader
	// exited).
	Exit(ctx context.Context) (hostfork.CommandRecord, error)
}

// localSession is a command's session reached from this process.
type localSession struct{ *hostfork.Command }

func (l localSession) Attach(ctx context.Context, o hostfork.AttachOptions) (attached, error) {
	s, err := l.AttachWith(ctx, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (l local) SessionOf(ctx context.Context, id string) (sessionCmd, error) {
	cmd, err := l.OpenCommand(ctx, id)
	if err != nil {
		return nil, err
	}
	return localSession{cmd}, nil
}

// local is the library in this process.
type local struct{ *hostfork.Host }

var _ launched = (*hostfork.Command)(nil)

func (l local) Where() string { return l.Root() }

func (l local) Logs(ctx context.Context, id string, o hostfork.LogOptions) (io.ReadCloser, error) {
	cmd, err := l.OpenCommand(ctx, id)
	if err != nil {
		return nil, err
	}
	return cmd.Logs(ctx, o)
}

func (l local) OpenFile(ctx context.Context, envPrefix, name string) (io.ReadCloser, error) {
	return l.ReadFile(ctx, envPrefix, name)
}

func (l local) WaitUntil(ctx context.Context, id string, o hostfork.WaitOptions, timeout time.Duration) (hostfork.WaitOutcome, error) {
	cmd, err := l.OpenCommand(ctx, id)
	if err != nil {
		return hostfork.WaitOutcome{}, err
	}
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	out, err := cmd.WaitUntil(wctx, o)
	if err != nil && timeout > 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return out, fmt.Errorf("the wait's --timeout (%s) passed; command %s runs on: %w", timeout, id, hostfork.ErrTimedOut)
	}
	return out, err
}

func (l local) Create(ctx context.Context, p *hostfork.Plan) (*hostfork.EnvRecord, error) {
	env, err := l.Host.Create(ctx, p)
	if err != nil {
		return nil, err
	}
	rec, _, err := l.Status(ctx, env.ID())
	return rec, err
}

// command fills a library command from a launch request: stdin passes
// through (a terminal makes the command the foreground job), and in pipe
// mode the output streams to this process's stdout and stderr.
func (lr *launchReq) command(cmd *hostfork.Command) *hostfork.Command {
	cmd.Cwd, cmd.Purpose, cmd.Labels, cmd.Timeout = lr.cwd, lr.purpose, lr.labels, lr.timeout
	cmd.Output, cmd.OwnerExit = lr.output, lr.ownerExit
	cmd.EnvPolicy, cmd.EnvSet = lr.envPolicy, lr.envSet
	cmd.Workload, cmd.Admit, cmd.OnAdmissionWait = lr.workload, lr.admit, lr.onAdmissionWait
	switch lr.session {
	case "tty":
		cmd.TTY, cmd.Size = true, lr.size
	case "stdin":
		cmd.Stdin = hostfork.StdinPipe
	}
	if lr.stdin != nil {
		cmd.Stdin = lr.stdin
		cmd.Foreground = term.IsTerminal(int(lr.stdin.Fd()))
	}
	if lr.output == hostfork.OutputPipe {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	}
	return cmd
}

func (l local) Run(ctx context.Context, p *hostfork.Plan, lr *launchReq) (launched, error) {
	cmd := lr.command(l.Command(lr.argv...))
	if _, err := l.Host.Run(ctx, p, cmd); err != nil {
		return nil, err
	}
	return cmd, nil
}

func (l local) Start(ctx context.Context, envPrefix string, lr *launchReq) (launched, error) {
	env, err := l.OpenEnv(ctx, envPrefix)
	if err != nil {
		return nil, err
	}
	cmd := lr.command(env.Command(lr.argv...))
	if err := cmd.Start(ctx); err != nil {
		return nil, err
	}
	return cmd, nil
}

// foregroundJob reports whether a started command owns this terminal (its
// stdin is the terminal): only a command of this process can.
func foregroundJob(cmd launched) bool {
	c, ok := cmd.(*hostfork.Command)
	return ok && c.Foreground
}
