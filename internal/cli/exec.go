package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/spec"
)

func newExecCmd(g *globals) *cobra.Command {
	var detach, asJSON bool
	af := &admitFlags{}
	var cwd, output, purpose string
	var labels []string
	var lf launchEnvFlags
	c := &cobra.Command{
		Use:   "exec ENV [--detach] [--cwd DIR] -- CMD [ARGS...]",
		Short: "Run a command as an owned tree in an existing environment",
		Long: `exec runs CMD inside environment ENV's view, as its own owned tree. In the
foreground it exits with CMD's status, and stops what CMD left behind when
its leader exits (or when this process is killed); the environment goes on.
--detach prints the command id at once; the command then runs under the
environment's deadline. Finishing an exec never extends the environment's
expiry.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageErr("exec needs an environment and a command: hostfork exec ENV -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			if len(args) < 2 {
				return usageErr("exec needs a command after the environment: hostfork exec ENV -- CMD [ARGS...]")
			}
			switch {
			case output == "" && detach:
				output = hostfork.OutputFiles
			case output == "":
				output = hostfork.OutputPipe
			case output != hostfork.OutputFiles && output != hostfork.OutputPipe && output != hostfork.OutputInherit:
				return usageErr("--output %q: use files, pipe or inherit", output)
			case detach && output != hostfork.OutputFiles:
				return usageErr("--detach writes output to files; drop --output %s or run in the foreground", output)
			}
			lm := map[string]string{}
			for _, l := range labels {
				k, v, ok := strings.Cut(l, "=")
				if !ok || k == "" {
					return usageErr("--label %q: write it as KEY=VALUE", l)
				}
				lm[k] = v
			}
			var launch spec.Launch
			if err := lf.apply(&launch); err != nil {
				return err
			}
			h, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer h.Close()
			lf.recapture(ctx, g, h)
			env, err := h.OpenEnv(ctx, args[0])
			if err != nil {
				return err
			}
			cmd := env.Command(args[1:]...)
			if err := af.apply(cmd, g); err != nil {
				return err
			}
			cmd.Output = output
			cmd.Cwd = cwd
			cmd.Purpose = purpose
			cmd.Labels = lm
			cmd.EnvPolicy, cmd.EnvSet = launch.EnvPolicy, lf.envVars
			cmd.OwnerExit = "stop"
			if detach {
				cmd.OwnerExit = "detach"
			}
			if output == hostfork.OutputPipe {
				cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			}
			if output == hostfork.OutputInherit && term.IsTerminal(int(os.Stdin.Fd())) {
				cmd.Foreground = true
			}
			if err := cmd.Start(ctx); err != nil {
				return err
			}
			warnEnvNote(g, cmd)
			if detach {
				if asJSON {
					return printJSON(g.out, map[string]string{"env": env.ID(), "command": cmd.ID()})
				}
				fmt.Fprintln(g.out, cmd.ID())
				return nil
			}
			return foreground(ctx, g, cmd, func() error {
				return cmd.StopTree(context.Background(), hostfork.StopOptions{Reason: hostfork.ReasonOwnerExit})
			})
		},
	}
	af.add(c)
	c.Flags().BoolVar(&detach, "detach", false, "print the command id and return; it runs under the environment's deadline")
	c.Flags().StringVar(&cwd, "cwd", "", "working directory, resolved inside the view")
	c.Flags().StringVar(&output, "output", "", "files, pipe (foreground default) or inherit")
	c.Flags().StringVar(&purpose, "purpose", "", "why this command runs")
	c.Flags().StringArrayVar(&labels, "label", nil, "label K=V (repeatable)")
	c.Flags().BoolVar(&asJSON, "json", false, "with --detach: print the ids as JSON")
	lf.add(c, true)
	return c
}

func newShellCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "shell [--spec FILE] [flags]",
		Short: "Start bash in a new environment on this terminal",
		Long: `shell creates an environment like run, starts bash in it with this
terminal (inherited descriptors), and stops the environment when bash exits.`,
		Args: exactArgs(0, "no arguments (use --spec FILE and flags)"),
		RunE: func(c *cobra.Command, args []string) error {
			f.output = hostfork.OutputInherit
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
