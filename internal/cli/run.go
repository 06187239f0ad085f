package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/habemus-papadum/hostfork"
)

type runFlags struct {
	envFlags
	admitFlags
	output  string
	cwd     string
	detach  bool
	json    bool
	capture bool
}

func newRunCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a command as an owned tree and exit with its status",
		Long: `run creates an environment, runs CMD in it as an owned tree, and stops the
environment when CMD's leader exits: any daemon it left behind is stopped, and
the record says so. The exit status is CMD's (128+N for signal N).

In the foreground, output streams to this terminal and is also written to the
command's stdout/stderr files (--output pipe); --output inherit hands CMD this
process's descriptors; --output files only writes the files. --detach prints
the run id at once and leaves the run under its recorded expiry (--ttl or
--until-stopped is required).`,
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
	c.Flags().BoolVar(&f.detach, "detach", false, "return the run id at once; the run continues under --ttl or --until-stopped")
	c.Flags().BoolVar(&f.json, "json", false, "with --detach: print the ids as JSON")
	f.admitFlags.add(c)
	c.Flags().BoolVar(&f.capture, "capture", false, "take the output back: print one JSON object with stdout, stderr (at most 16 MiB each), their capture states and the result")
	c.Flags().SetInterspersed(false)
	return c
}

func runRun(ctx context.Context, g *globals, f *runFlags, argv []string) error {
	s, err := f.spec(f.detach)
	if err != nil {
		return err
	}
	if s.View.Empty() && !s.MayChangePath() {
		// Reject what can be known bad before anything is created.
		if _, err := hostfork.LookPath(argv[0], nil); err != nil {
			return err
		}
	}
	output := f.output
	if f.capture {
		if f.detach || (output != "" && output != hostfork.OutputPipe) {
			return usageErr("--capture takes the output back in the foreground; drop --detach/--output")
		}
		output = hostfork.OutputPipe
	}
	switch {
	case output == "" && f.detach:
		output = hostfork.OutputFiles
	case output == "":
		output = hostfork.OutputPipe
	case output != hostfork.OutputFiles && output != hostfork.OutputPipe && output != hostfork.OutputInherit:
		return usageErr("--output %q: use files, pipe or inherit", output)
	case f.detach && output != hostfork.OutputFiles:
		return usageErr("--detach writes output to files; drop --output %s or run in the foreground", output)
	}
	if f.cwd != "" && s.View.Empty() {
		if st, err := os.Stat(f.cwd); err != nil || !st.IsDir() {
			return usageErr("--cwd %s: no such directory", f.cwd)
		}
	}
	h, err := g.open(ctx)
	if err != nil {
		return err
	}
	defer h.Close()
	f.recapture(ctx, g, h)
	plan, err := h.Plan(ctx, s)
	if err != nil {
		return err
	}
	env, err := h.Create(ctx, plan)
	if err != nil {
		return err
	}
	cmd := env.Command(argv...)
	if err := f.admitFlags.apply(cmd, g); err != nil {
		_ = env.Stop(context.Background(), hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit})
		return err
	}
	cmd.Output = output
	cmd.Cwd = f.cwd
	cmd.Purpose = f.purpose
	if output == hostfork.OutputPipe && !f.capture {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	}
	if output == hostfork.OutputInherit && term.IsTerminal(int(os.Stdin.Fd())) {
		cmd.Foreground = true
	}
	if err := cmd.Start(ctx); err != nil {
		_ = env.Stop(context.Background(), hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit})
		return err
	}
	warnEnvNote(g, cmd)
	if f.detach {
		if f.json {
			return printJSON(g.out, map[string]string{"env": env.ID(), "command": cmd.ID()})
		}
		fmt.Fprintln(g.out, env.ID())
		return nil
	}
	if f.capture {
		return runCapture(ctx, g, env, cmd)
	}
	// The run ends when the leader exits: stop whatever it left behind.
	return foreground(ctx, g, cmd, func() error {
		return env.Stop(context.Background(), hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit})
	})
}

// foreground forwards terminal signals to a started command's leader,
// waits for the leader, runs finish (which stops what is left), and turns
// the leader's status into the exit status.
func foreground(ctx context.Context, g *globals, cmd *hostfork.Command, finish func() error) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if cmd.Foreground {
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
				if cmd.Foreground && (sig == syscall.SIGINT || sig == syscall.SIGQUIT) {
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
	if cmd.Foreground {
		reclaimTerminal()
	}
	serr := finish()
	if werr != nil {
		return werr
	}
	if serr != nil {
		fmt.Fprintf(g.err, "hostfork: %v\n", serr)
	}
	if res.Error != "" && res.ExitCode != nil && (*res.ExitCode == ExitNotFound || *res.ExitCode == ExitCannotExec) {
		fmt.Fprintf(g.err, "hostfork: %s\n", res.Error)
	}
	status, ok := hostfork.ExitStatus(res)
	if !ok {
		return withCode(ExitIncomplete, errors.New("the command's exit status was not observed (see 'hostfork status "+cmd.ID()+"')"))
	}
	if status != 0 {
		return withCode(status, nil)
	}
	return nil
}

// reclaimTerminal makes our process group the terminal's foreground again.
func reclaimTerminal() {
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return
	}
	_ = tcsetpgrp(fd, syscall.Getpgrp())
}

// runCapture waits for the leader with the capture contract, stops the
// environment, and prints the result as one JSON object.
func runCapture(ctx context.Context, g *globals, env *hostfork.Env, cmd *hostfork.Command) error {
	res, err := cmd.Capture(ctx)
	serr := env.Stop(context.Background(), hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit})
	if err != nil {
		return err
	}
	if serr != nil {
		fmt.Fprintf(g.err, "hostfork: %v\n", serr)
	}
	status, ok := hostfork.ExitStatus(res.Record)
	out := map[string]any{
		"command":       res.Record.ID,
		"env":           res.Record.EnvID,
		"exit_status":   status,
		"exit_observed": ok,
		"exit_code":     res.Record.ExitCode,
		"signal":        res.Record.Signal,
		"complete":      res.Complete(),
		"stdout":        string(res.Stdout.Data),
		"stderr":        string(res.Stderr.Data),
		"capture":       map[string]hostfork.StreamResult{"stdout": res.Stdout, "stderr": res.Stderr},
		"receipt":       res.Receipt,
	}
	if err := printJSON(g.out, out); err != nil {
		return err
	}
	if !ok {
		return withCode(ExitIncomplete, nil)
	}
	if status != 0 {
		return withCode(status, nil)
	}
	return nil
}
