package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

func newExecCmd(g *globals) *cobra.Command {
	var detach, asJSON, tty bool
	af := &admitFlags{}
	var cwd, outputFlag, purpose, stdinFlag, timeoutFlag string
	var labels []string
	var lf launchEnvFlags
	c := &cobra.Command{
		Use:   "exec ENV [--detach] [--cwd DIR] -- CMD [ARGS...]",
		Short: "Run a command as an owned tree in an existing environment",
		Long: `exec runs CMD inside environment ENV's view, as its own owned tree. In the
foreground it exits with CMD's status (124 when hostfork ended it), and stops
what CMD left behind when its leader exits (or when this process is killed);
the environment goes on. stdin passes through as with run (--stdin none for
/dev/null). --detach prints the command id at once; the command then runs
under the environment's deadline. --timeout bounds this command alone and
never extends the environment's deadline; finishing an exec never extends
the environment's expiry either.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageErr("exec needs an environment and a command: hostfork exec ENV -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			sess, output, stdin, err := launchMode(g, tty, stdinFlag, detach, outputFlag, false)
			if err != nil {
				return err
			}
			if output == hostfork.OutputInherit && g.remote() {
				return usageErr("--output inherit can't go with --host: the server's command can't write to this process's descriptors (the default, pipe, streams its output here)")
			}
			timeout, err := parseTimeout(timeoutFlag)
			if err != nil {
				return err
			}
			lm, err := labelsOf(labels)
			if err != nil {
				return err
			}
			var launch spec.Launch
			if err := lf.apply(&launch); err != nil {
				return err
			}
			var catch *signalCatch
			if !detach {
				catch = catchSignals()
				defer catch.release()
			}
			h, err := g.backend(ctx)
			if err != nil {
				return err
			}
			defer h.Close()
			if err := lf.recapture(ctx, g, h); err != nil {
				return err
			}
			lr := &launchReq{argv: args[1:], output: output, cwd: cwd, purpose: purpose, labels: lm,
				timeout: timeout, envPolicy: launch.EnvPolicy, envSet: lf.envVars, ownerExit: hostfork.OwnerExitStop, stdin: stdin,
				session: sess, size: termSize()}
			if detach {
				lr.ownerExit = hostfork.OwnerExitDetach
			}
			if err := af.apply(lr, g); err != nil {
				return err
			}
			sigs := catch.ready()
			cmd, err := h.Start(ctx, args[0], lr)
			if err != nil {
				return err
			}
			warnEnvNote(g, cmd)
			if detach {
				if asJSON {
					_, rec, err := h.Status(ctx, cmd.ID())
					if err != nil {
						return err
					}
					return printJSON(g.out, rec)
				}
				fmt.Fprintln(g.out, cmd.ID())
				return nil
			}
			if err := attachForeground(ctx, g, h, cmd, sess); err != nil {
				return err
			}
			return foreground(ctx, g, h, cmd, sigs, lr.output, hostfork.ReasonOwnerExit)
		},
	}
	af.add(c)
	c.Flags().BoolVar(&detach, "detach", false, "print the command id and return; it runs under the environment's deadline")
	c.Flags().StringVar(&cwd, "cwd", "", "working directory, resolved inside the view")
	c.Flags().StringVar(&outputFlag, "output", "", "files, pipe (foreground default) or inherit")
	c.Flags().StringVar(&stdinFlag, "stdin", "", "inherit (the foreground default), none, or pipe (with --detach: a pipe its guardian holds; write with 'hostfork send')")
	c.Flags().BoolVar(&tty, "tty", false, "give the command a pseudo-terminal held by its guardian (foreground: this terminal, like ssh -t; --detach: 'hostfork attach' later)")
	c.Flags().StringVar(&timeoutFlag, "timeout", "", "stop this command's tree this long after it starts (reason timeout, exit 124)")
	c.Flags().StringVar(&purpose, "purpose", "", "why this command runs")
	c.Flags().StringArrayVar(&labels, "label", nil, "label K=V (repeatable)")
	c.Flags().BoolVar(&asJSON, "json", false, "with --detach: print the command's record as JSON")
	lf.add(c, true)
	return c
}

func newShellCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "shell [--spec FILE] [flags]",
		Short: "Start bash in a new environment on this terminal",
		Long: `shell creates an environment like run, starts bash in it with this
terminal (inherited descriptors, bash as the terminal's foreground job), and
stops the environment when bash exits.`,
		Args: exactArgs(0, "no arguments (use --spec FILE and flags)"),
		RunE: func(c *cobra.Command, args []string) error {
			f.output = string(hostfork.OutputInherit)
			bash := "bash"
			if _, err := hostfork.LookPath(bash, nil); err != nil {
				return err
			}
			return runRun(c.Context(), g, f, []string{bash})
		},
	}
	f.envFlags.add(c)
	c.Flags().StringVar(&f.cwd, "cwd", "", "working directory, resolved inside the view")
	return c
}
