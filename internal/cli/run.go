package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

type runFlags struct {
	envFlags
	admitFlags
	output  string
	cwd     string
	stdin   string
	timeout string
	detach  bool
	json    bool
	capture bool
	tty     bool
}

func newRunCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a command as an owned tree and exit with its status",
		Long: `run creates an environment, runs CMD in it as an owned tree, and stops the
environment when CMD's tree ends: when CMD's leader exits, whatever it left
behind is stopped and the record says so. The exit status is CMD's (128+N for
signal N), or 124 when hostfork ended CMD (deadline, timeout, idle, owner exit,
OOM), with one line on stderr saying why.

stdin passes through (a pipe, a file, or this terminal, where CMD becomes the
foreground job); --stdin none gives CMD /dev/null. In the foreground, output
streams to this terminal and is also written to the command's stdout/stderr
files (--output pipe); --output inherit hands CMD this process's descriptors;
--output files only writes the files. --detach prints the environment id at
once and leaves the run under its recorded expiry (--ttl or --until-stopped is
required); its environment stops when CMD's tree ends.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 || args[0] == "" {
				return usageErr("run needs a command: hostfork run [flags] -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error { return runRun(c.Context(), g, f, args) },
	}
	f.envFlags.add(c)
	c.Flags().StringVar(&f.output, "output", "", "files, pipe (foreground default) or inherit")
	c.Flags().StringVar(&f.cwd, "cwd", "", "working directory")
	c.Flags().StringVar(&f.stdin, "stdin", "", "inherit (the default in the foreground: pass this process's stdin through), none (/dev/null; the default with --detach) or pipe (with --detach: a pipe its guardian holds; write with 'hostfork send')")
	c.Flags().BoolVar(&f.tty, "tty", false, "give the command a pseudo-terminal held by its guardian (in the foreground: this terminal, raw, like ssh -t; with --detach: 'hostfork attach' later)")
	c.Flags().StringVar(&f.timeout, "timeout", "", "stop the command's tree this long after it starts (reason timeout, exit 124); never extends --ttl")
	c.Flags().BoolVar(&f.detach, "detach", false, "return the environment id at once; the run continues under --ttl or --until-stopped")
	c.Flags().BoolVar(&f.json, "json", false, "with --detach: print the environment's record as JSON")
	f.admitFlags.add(c)
	c.Flags().BoolVar(&f.capture, "capture", false, "take the output back: print one JSON object with stdout, stderr (at most 16 MiB each), their capture states and the result")
	c.Flags().SetInterspersed(false)
	return c
}

// stdinMode resolves --stdin for a launch. Through a server (--host) the
// default is none: the API can't carry this process's stdin.
func stdinMode(g *globals, flag string, detach bool) (*os.File, error) {
	switch flag {
	case "":
		if detach || g.remote() {
			return nil, nil
		}
		return os.Stdin, nil
	case "inherit":
		if detach {
			return nil, usageErr("--stdin inherit can't go with --detach: a detached command outlives this process's stdin (use --stdin none)")
		}
		if g.remote() {
			return nil, usageErr("--stdin inherit can't go with --host: the server's command can't read this process's stdin (--stdin none, the default with --host, gives it /dev/null)")
		}
		return os.Stdin, nil
	case "none":
		return nil, nil
	}
	return nil, usageErr("--stdin %q: use inherit or none", flag)
}

// launchMode resolves --tty, --stdin, --output (and run's --capture) for a
// launch: the session to give the command ("tty", "stdin" or ""), the
// output mode (by default files with --detach, else pipe) and the
// command's stdin (none with a session).
func launchMode(g *globals, tty bool, stdinFlag string, detach bool, outputFlag string, capture bool) (string, hostfork.OutputMode, *os.File, error) {
	sess, output := "", hostfork.OutputMode(outputFlag)
	switch {
	case tty && stdinFlag != "":
		return "", "", nil, usageErr("--tty makes the terminal the command's input; drop --stdin %s", stdinFlag)
	case tty && output != "" && output != hostfork.OutputFiles:
		return "", "", nil, usageErr("--tty writes what the terminal shows to the command's log; drop --output %s", output)
	case tty:
		sess, output = "tty", hostfork.OutputFiles
	case stdinFlag != "pipe":
	case !detach:
		return "", "", nil, usageErr("--stdin pipe is for a detached command: add --detach, then write with 'hostfork send ID TEXT' and end with 'hostfork send --eof ID'")
	default:
		sess = "stdin"
	}
	if capture && sess != "" {
		return "", "", nil, usageErr("--capture takes the output back in the foreground; drop --tty/--stdin pipe")
	}
	if capture {
		if detach || (output != "" && output != hostfork.OutputPipe) {
			return "", "", nil, usageErr("--capture takes the output back in the foreground; drop --detach/--output")
		}
		output = hostfork.OutputPipe
	}
	switch {
	case output == "" && detach:
		output = hostfork.OutputFiles
	case output == "":
		output = hostfork.OutputPipe
	case output != hostfork.OutputFiles && output != hostfork.OutputPipe && output != hostfork.OutputInherit:
		return "", "", nil, usageErr("--output %q: use files, pipe or inherit", output)
	case detach && output != hostfork.OutputFiles:
		return "", "", nil, usageErr("--detach writes output to files; drop --output %s or run in the foreground", output)
	}
	var stdin *os.File
	if sess == "" {
		var err error
		if stdin, err = stdinMode(g, stdinFlag, detach); err != nil {
			return "", "", nil, err
		}
	}
	return sess, output, stdin, nil
}

// termSize is this terminal's size (zero when stdin is not a terminal).
func termSize() hostfork.TermSize {
	w, h, err := term.GetSize(int(os.Stdin.Fd()))
	if err != nil || w <= 0 || h <= 0 || w > 65535 || h > 65535 {
		return hostfork.TermSize{}
	}
	return hostfork.TermSize{Cols: uint16(w), Rows: uint16(h)}
}

// attachForeground connects this terminal to a foreground --tty
// command, as ssh -t does, until its output ends: through its guardian's
// socket in this process, or a server's WebSocket (--host).
func attachForeground(ctx context.Context, g *globals, h backend, cmd launched, sess string) error {
	if sess != "tty" {
		return nil
	}
	sc, err := h.SessionOf(ctx, cmd.ID())
	if err != nil {
		return err
	}
	s, err := sc.Attach(ctx, hostfork.AttachOptions{Replay: math.MaxInt64})
	if errors.Is(err, hostfork.ErrCommandFinished) {
		// It ended before the attach: its output is all in its log.
		r, lerr := h.Logs(ctx, cmd.ID(), hostfork.LogOptions{})
		if lerr != nil {
			return lerr
		}
		defer r.Close()
		_, err = io.Copy(g.out, r)
		return err
	}
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = interact(g, s, nil, true)
	return err
}

func parseTimeout(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, usageErr("--timeout %q: give a positive duration such as 30s or 10m", s)
	}
	return d, nil
}

func runRun(ctx context.Context, g *globals, f *runFlags, argv []string) error {
	remote := g.remote()
	if remote {
		if err := f.remoteOnly(); err != nil {
			return err
		}
	}
	// Through a server the environment outlives this process: its owner
	// is the server (owner exit detach), and it needs an expiry.
	s, err := f.spec(f.detach || remote)
	if err != nil {
		return err
	}
	if !remote && s.View.Empty() && !s.MayChangePath() {
		// Reject what can be known bad before anything is created (the
		// server checks it itself, with its own PATH).
		if _, err := hostfork.LookPath(argv[0], nil); err != nil {
			return err
		}
	}
	timeout, err := parseTimeout(f.timeout)
	if err != nil {
		return err
	}
	sess, output, stdin, err := launchMode(g, f.tty, f.stdin, f.detach, f.output, f.capture)
	if err != nil {
		return err
	}
	if f.cwd != "" && s.View.Empty() {
		if st, err := os.Stat(f.cwd); err != nil || !st.IsDir() {
			return usageErr("--cwd %s: no such directory", f.cwd)
		}
	}
	var catch *signalCatch
	if !f.detach && !f.capture {
		catch = catchSignals()
		defer catch.release()
	}
	h, err := g.backend(ctx)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := f.recapture(ctx, g, h); err != nil {
		return err
	}
	plan, err := runPlan(ctx, g, h, s)
	if err != nil {
		return err
	}
	lr := &launchReq{argv: argv, output: output, cwd: f.cwd, purpose: f.purpose, timeout: timeout, stdin: stdin, session: sess, size: termSize()}
	if err := f.admitFlags.apply(lr, g); err != nil {
		return err
	}
	if f.capture {
		return runCapture(ctx, g, h.(local).Host, plan, lr)
	}
	sigs := catch.ready()
	cmd, err := h.Run(ctx, plan, lr)
	if err != nil {
		return err
	}
	warnEnvNote(g, cmd)
	if f.detach {
		env := cmd.Record().Env
		if f.json {
			rec, _, err := h.Status(ctx, env)
			if err != nil {
				return err
			}
			return printJSON(g.out, hostfork.RedactEnv(*rec))
		}
		fmt.Fprintln(g.out, env)
		return nil
	}
	if err := attachForeground(ctx, g, h, cmd, sess); err != nil {
		return err
	}
	// The run ends when the leader exits: stop whatever it left behind.
	return foreground(ctx, g, h, cmd, sigs, output, hostfork.ReasonOwnerExit)
}

// remoteOnly refuses what a run can't do through a server, before
// anything is made: the server can't reach this terminal (--stdin
// inherit, --output inherit, --capture), and the environment it
// makes for the run must be bounded without this process (--ttl or
// --until-stopped).
func (f *runFlags) remoteOnly() error {
	switch {
	case f.capture:
		return usageErr("--capture can't go with --host: the server writes the output to files (use 'hostfork --host ... run' and 'hostfork logs', or run --capture without --host)")
	case f.output == string(hostfork.OutputInherit):
		return usageErr("--output inherit can't go with --host: the server's command can't write to this process's descriptors (the default, pipe, streams its output here)")
	case f.ownerExit == spec.OwnerExitStop:
		return usageErr("--owner-exit stop can't go with --host: the server owns the environment (a foreground run stops it when the command ends; --ttl bounds it if this process is killed)")
	case f.ttl == "" && !f.untilStopped && f.specFile == "":
		return usageErr("run with --host needs --ttl DUR (or --until-stopped): the server makes the environment, which must end on its own if this process is killed")
	}
	return nil
}

// runPlan plans the run's environment and warns of the limits it leaves
// unenforced. Through a server, a spec without limits is not planned
// first: the server plans the run request itself (and refuses what it
// can't make, as the plan request would), and a plan request's only use
// here is that warning, which a spec without limits can't have; it was a
// round trip of 0.9 ms before every such run (decision 71).
func runPlan(ctx context.Context, g *globals, h backend, s spec.Environment) (*hostfork.Plan, error) {
	if g.remote() && s.Limits.Empty() {
		return &hostfork.Plan{Spec: s}, nil
	}
	p, err := h.Plan(ctx, s)
	if err != nil {
		return nil, err
	}
	warnUnenforced(g, p)
	return p, nil
}

// warnUnenforced says at the start of a run which limits are not
// enforced (accepted with --allow-weaker); the record keeps it too.
// Without --allow-weaker such a plan is refused (its Unsupported list
// says why), so nothing is said to have been accepted (issue 39, item 14).
func warnUnenforced(g *globals, p *hostfork.Plan) {
	if !p.Spec.Limits.AllowWeaker || len(p.Unsupported) > 0 {
		return
	}
	for _, l := range p.Limits {
		if l.Mechanism == "" {
			fmt.Fprintf(g.err, "hostfork: warning: the %s limit (%s) is NOT enforced on this host (accepted with --allow-weaker)\n", l.Resource, l.Value)
		}
	}
}

// forwarded are the signals a foreground run or exec passes to its
// leader.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// signalCatch catches the signals a foreground run or exec forwards, so
// that a signal arriving while the command starts is forwarded once it
// runs, instead of ending this process by its default action (and the
// command with it).
//
// Turning a signal's delivery on or off is a round trip to the runtime's
// signal-mask thread, each (with one P) two thread hand-offs: seven
// signals took 0.3-0.6 ms to catch and as long again to release, on the
// critical path of every foreground run (decision 55). So the catch is
// set up in the background while the store opens and the plan is made
// (catchSignals), awaited before the command starts (ready), and released
// in the background on the way out (release).
type signalCatch struct {
	ch   chan os.Signal
	done chan struct{}
}

// catchSignals starts catching the forwarded signals; ready returns the
// channel once they are caught.
func catchSignals() *signalCatch {
	c := &signalCatch{ch: make(chan os.Signal, 8), done: make(chan struct{})}
	go func() {
		signal.Notify(c.ch, forwarded...)
		close(c.done)
	}()
	return c
}

// ready waits until the signals are caught and returns their channel (nil
// for a nil catch).
func (c *signalCatch) ready() <-chan os.Signal {
	if c == nil {
		return nil
	}
	<-c.done
	return c.ch
}

// release stops catching once the catch is in place, without waiting for
// it: signals that arrive meanwhile land in the channel, which nothing
// reads any more.
func (c *signalCatch) release() {
	if c == nil {
		return
	}
	go func() {
		<-c.done
		signal.Stop(c.ch)
	}()
}

// foreground forwards signals (sigs, from catchSignals) to a started
// command's leader, waits for the leader, stops what it left behind
// (leftovers, with reason), waits until the tree's result is recorded, and
// turns the leader's status into the exit status: its own, 128+N, or 124
// with one line saying why when hostfork ended it.
//
// cmd is a command of this process or of a server (--host): then, with
// output pipe, its stdout and stderr are followed from offset 0 to this
// process's until its tree has exited, and written out before the exit
// status.
func foreground(ctx context.Context, g *globals, h backend, cmd launched, sigs <-chan os.Signal, output hostfork.OutputMode, leftovers hostfork.StopReason) error {
	drain := func() {}
	if _, ours := cmd.(*hostfork.Command); !ours && output == hostfork.OutputPipe {
		drain = follow(ctx, g, h, cmd.ID())
	}
	tty := foregroundJob(cmd)
	if tty {
		// The workload owns the terminal now; we need it back later.
		signal.Ignore(syscall.SIGTTOU, syscall.SIGTTIN)
	}
	done := make(chan struct{})
	go func() {
		stops := 0
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if tty && (sig == syscall.SIGINT || sig == syscall.SIGQUIT) {
					continue // the terminal already delivered it to the job
				}
				_ = cmd.Signal(sig.(syscall.Signal))
				if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
					stops++
					if stops > 1 {
						go cmd.StopTree(context.Background(), hostfork.StopOptions{Reason: hostfork.ReasonUser})
					}
				}
			}
		}
	}()
	res, werr := cmd.Wait(ctx)
	close(done)
	if tty {
		reclaimTerminal()
	}
	if werr != nil {
		return werr
	}
	if res.TreeState != hostfork.PhaseExited && !res.Final() && !treeEndsSoon(ctx, cmd) {
		if _, err := cmd.StopTree(context.Background(), hostfork.StopOptions{Reason: leftovers}); err != nil && !errors.Is(err, hostfork.ErrClosed) {
			fmt.Fprintf(g.err, "hostfork: stopping what the command left behind: %s\n", errText(err))
		}
	}
	final, terr := cmd.WaitTree(ctx)
	drain()
	if terr != nil {
		if errors.Is(terr, hostfork.ErrUnverified) {
			fmt.Fprintf(g.err, "hostfork: %s\n", errText(terr))
		} else if final.ID != "" {
			fmt.Fprintf(g.err, "hostfork: warning: %s\n", errText(terr))
		} else {
			return terr
		}
	}
	if final.ID == "" {
		final = res
	}
	return commandExit(g, final)
}

// commandExit turns a command's final record into the exit status of
// run, exec, attach, wait and logs --follow: the leader's own, 128+N, or
// 124 with one line saying why when hostfork ended it; 120 when the
// status was never observed.
func commandExit(g *globals, final hostfork.CommandRecord) error {
	if final.Error != "" && final.ExitCode != nil && (*final.ExitCode == ExitNotFound || *final.ExitCode == ExitCannotExec) {
		fmt.Fprintf(g.err, "hostfork: %s\n", clean(final.Error))
	}
	warnTruncated(g, &final)
	if why := endedBy(&final); why != "" {
		fmt.Fprintf(g.err, "hostfork: %s\n", why)
		return withCode(ExitEnded, nil)
	}
	status, ok := hostfork.ExitStatus(final)
	if !ok {
		return withCode(ExitIncomplete, errors.New("the command's exit status was not observed (see 'hostfork status "+final.ID+"')"))
	}
	if status != 0 {
		return withCode(status, nil)
	}
	return nil
}

// treeEndsSoon waits briefly for a tree whose leader has exited to end by
// itself, as nearly every tree does right after its leader (the
// guardian's tree event follows its leader event): only what is still
// there then is stopped as leftovers. For a command of this process the
// guardian's word is enough (Command.TreeSeen): recording the result can
// take longer than the wait under load, and a stop then would be sent to
// a tree that had ended.
func treeEndsSoon(ctx context.Context, cmd launched) bool {
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if seen := cmd.TreeSeen(); seen != nil {
		select {
		case <-seen:
			return true
		case <-wctx.Done():
			return false
		}
	}
	rec, err := cmd.WaitTree(wctx)
	return err == nil && rec.Final()
}

// warnTruncated says so when a command's output files may be cut, and
// when the kernel OOM-killed a process of the command other than its
// leader (the leader's own status is kept).
func warnTruncated(g *globals, c *hostfork.CommandRecord) {
	if c.OOM != nil && *c.OOM && c.StopReason != hostfork.ReasonLimit {
		fmt.Fprintf(g.err, "hostfork: warning: a process of command %s was OOM-killed under the environment's memory budget (%s)\n", c.ID, clean(c.OOMEvidence))
	}
	if c.OutputTruncated {
		fmt.Fprintf(g.err, "hostfork: warning: the output files of command %s may be cut: the store's filesystem was full (free space, then see %s)\n", c.ID, clean(c.Dir))
	}
}

// endedBy says why hostfork ended a command's leader ("" when it did
// not): a stop that hostfork decided before the leader exited, or the
// kernel's OOM kill under the environment's memory budget.
func endedBy(c *hostfork.CommandRecord) string {
	if c.OOM != nil && *c.OOM && c.StopReason == hostfork.ReasonLimit {
		return fmt.Sprintf("command %s was OOM-killed: it exceeded the environment's memory budget (%s)", c.ID, clean(c.OOMEvidence))
	}
	if !c.StoppedByHostfork || !c.StopReason.EndedByHostfork() {
		return ""
	}
	why := map[hostfork.StopReason]string{
		hostfork.ReasonDeadline:   "the environment's deadline (--ttl) passed",
		hostfork.ReasonTimeout:    "its --timeout (" + c.Timeout.String() + ") passed",
		hostfork.ReasonIdle:       "it was idle for its --idle-timeout",
		hostfork.ReasonOwnerExit:  "its owner exited",
		hostfork.ReasonUser:       "a stop was requested ('hostfork stop')",
		hostfork.ReasonCancelled:  "its context was cancelled",
		hostfork.ReasonKeeperLost: "its environment's keeper was lost",
		hostfork.ReasonLimit:      "a resource limit was reached",
		hostfork.ReasonAbandoned:  "it was abandoned",
	}[c.StopReason]
	if why == "" {
		why = string(c.StopReason)
	}
	if c.State == hostfork.CommandFailed && c.Workload == nil {
		return fmt.Sprintf("command %s was stopped by hostfork before it started (nothing of it ran): %s", c.ID, why)
	}
	return fmt.Sprintf("command %s was stopped by hostfork: %s", c.ID, why)
}

// reclaimTerminal makes our process group the terminal's foreground again.
func reclaimTerminal() {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return
	}
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, syscall.Getpgrp())
}

// runCapture runs with the capture contract and prints the result as one
// JSON object. Output that is not valid UTF-8 is given as base64
// (stdout_base64, stderr_base64), so bytes are exact. An incomplete
// capture exits 120.
func runCapture(ctx context.Context, g *globals, h *hostfork.Host, plan *hostfork.Plan, lr *launchReq) error {
	cmd := lr.command(h.Command(lr.argv...))
	cmd.Stdout, cmd.Stderr = nil, nil // taken back, not streamed
	cmd.Stdin = nil                   // a captured run takes no terminal
	cmd.Foreground = false
	cmd.Output = hostfork.OutputPipe
	cmd.CaptureOutput = true
	if _, err := h.Run(ctx, plan, cmd); err != nil {
		return err
	}
	res, err := cmd.Capture(ctx)
	if err != nil {
		return err
	}
	if res.Record.TreeState != hostfork.PhaseExited && !res.Record.Final() {
		_, _ = cmd.StopTree(context.Background(), hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit})
	}
	final, terr := cmd.WaitTree(ctx)
	if terr == nil {
		res.Record = final
	}
	status, ok := hostfork.ExitStatus(res.Record)
	out := hostfork.CaptureOutput{
		Command: res.Record.ID, Env: res.Record.Env, ExitStatus: status, ExitObserved: ok,
		ExitCode: res.Record.ExitCode, Signal: res.Record.Signal, StopReason: res.Record.StopReason,
		Complete: res.Complete(), Receipt: res.Receipt, ReceiptError: res.ReceiptError, Record: res.Record,
		Capture: map[string]hostfork.CapturedStream{
			"stdout": {State: res.Stdout.State, Bytes: res.Stdout.Bytes, Error: res.Stdout.Error, Artifact: res.Stdout.Artifact},
			"stderr": {State: res.Stderr.State, Bytes: res.Stderr.Bytes, Error: res.Stderr.Error, Artifact: res.Stderr.Artifact},
		},
	}
	text := func(b []byte) (*string, []byte) {
		if utf8.Valid(b) {
			s := string(b)
			return &s, nil
		}
		return nil, b // base64 in JSON: the bytes stay exact
	}
	out.Stdout, out.StdoutBase64 = text(res.Stdout.Data)
	out.Stderr, out.StderrBase64 = text(res.Stderr.Data)
	if err := printJSON(g.out, out); err != nil {
		return err
	}
	warnTruncated(g, &res.Record)
	if why := endedBy(&res.Record); why != "" {
		fmt.Fprintf(g.err, "hostfork: %s\n", why)
		return withCode(ExitEnded, nil)
	}
	if !ok {
		return withCode(ExitIncomplete, nil)
	}
	if !res.Complete() {
		fmt.Fprintf(g.err, "hostfork: the capture is incomplete (see %s); the artifacts hold the whole output\n", res.Receipt)
		return withCode(ExitIncomplete, nil)
	}
	if status != 0 {
		return withCode(status, nil)
	}
	return nil
}
