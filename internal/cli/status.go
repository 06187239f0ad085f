package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status ID",
		Short: "Everything recorded about an environment or a command",
		Args:  exactArgs(1, "one environment or command id (a unique prefix is enough)"),
		RunE: g.withHost(func(c *cobra.Command, args []string, h *hostfork.Host) error {
			env, cmd, err := h.Status(c.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				if env != nil {
					return printJSON(g.out, envView(env))
				}
				return printJSON(g.out, commandView(cmd))
			}
			if env != nil {
				printEnv(g.out, env)
				return nil
			}
			printCommand(g.out, cmd, "")
			return nil
		}),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// commandJSON is a command record as status and stop print it: every
// result field is present, also before it has a value (the record's own
// encoding omits empty ones). capture stays null until it is recorded, like
// oom.
type commandJSON struct {
	*registry.Command
	StopReason    string                            `json:"stop_reason"`
	Capture       map[string]registry.StreamCapture `json:"capture"`
	CleanupErrors []string                          `json:"cleanup_errors"`
}

func commandView(c *registry.Command) commandJSON {
	v := commandJSON{Command: c, StopReason: c.StopReason, Capture: c.Capture, CleanupErrors: c.CleanupErrors}
	if v.CleanupErrors == nil {
		v.CleanupErrors = []string{}
	}
	return v
}

// envJSON is an environment's status with its commands as commandJSON.
type envJSON struct {
	*hostfork.EnvStatus
	Commands []commandJSON `json:"commands"`
}

func envView(e *hostfork.EnvStatus) envJSON {
	v := envJSON{EnvStatus: e, Commands: make([]commandJSON, len(e.Commands))}
	for i, c := range e.Commands {
		v.Commands[i] = commandView(c)
	}
	return v
}

func tstr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func printEnv(w io.Writer, e *hostfork.EnvStatus) {
	fmt.Fprintf(w, "environment %s\n", e.ID)
	fmt.Fprintf(w, "  state:        %s\n", e.State)
	fmt.Fprintf(w, "  tier:         %s\n", e.Tier)
	if e.Purpose != "" {
		fmt.Fprintf(w, "  purpose:      %s\n", e.Purpose)
	}
	for k, v := range e.Labels {
		fmt.Fprintf(w, "  label:        %s=%s\n", k, v)
	}
	fmt.Fprintf(w, "  created:      %s\n", e.CreatedAt.Local().Format(time.RFC3339))
	switch {
	case e.UntilStopped:
		fmt.Fprintf(w, "  deadline:     none (until stopped)\n")
	case e.DeadlineAt != nil:
		exp := ""
		if e.Expired {
			exp = " (passed)"
		}
		fmt.Fprintf(w, "  deadline:     %s%s (ttl %s, grace %s)\n", tstr(e.DeadlineAt), exp, e.TTL, e.Grace)
	default:
		fmt.Fprintf(w, "  deadline:     none while its owner runs (owner exit: %s)\n", e.OwnerExit)
	}
	fmt.Fprintf(w, "  owner exit:   %s (owner %s)\n", e.OwnerExit, e.OwnerAlive)
	if e.StopReason != "" {
		fmt.Fprintf(w, "  stop reason:  %s (requested %s, confirmed %s)\n", e.StopReason, tstr(e.StopRequestedAt), tstr(e.StoppedAt))
	}
	if e.CgroupPath != "" {
		fmt.Fprintf(w, "  cgroup:       %s\n", e.CgroupPath)
	}
	fmt.Fprintf(w, "  run dir:      %s\n", e.RunDir)
	if e.Error != "" {
		fmt.Fprintf(w, "  error:        %s\n", e.Error)
	}
	for _, ce := range e.CleanupErrors {
		fmt.Fprintf(w, "  cleanup error: %s\n", ce)
	}
	for _, c := range e.Commands {
		fmt.Fprintln(w)
		printCommand(w, c, "  ")
	}
}

func printCommand(w io.Writer, c *registry.Command, in string) {
	fmt.Fprintf(w, "%scommand %s (environment %s)\n", in, c.ID, c.EnvID)
	fmt.Fprintf(w, "%s  argv:         %s\n", in, strings.Join(c.Argv, " "))
	fmt.Fprintf(w, "%s  state:        %s\n", in, hostfork.ProcessState(c))
	if c.Purpose != "" {
		fmt.Fprintf(w, "%s  purpose:      %s\n", in, c.Purpose)
	}
	for k, v := range c.Labels {
		fmt.Fprintf(w, "%s  label:        %s=%s\n", in, k, v)
	}
	fmt.Fprintf(w, "%s  cwd:          %s\n", in, c.Cwd)
	if c.StdoutPath != "" {
		fmt.Fprintf(w, "%s  stdout:       %s\n", in, c.StdoutPath)
		fmt.Fprintf(w, "%s  stderr:       %s\n", in, c.StderrPath)
	} else {
		fmt.Fprintf(w, "%s  output:       inherited (no files)\n", in)
	}
	if c.Workload != nil {
		fmt.Fprintf(w, "%s  workload pid: %d\n", in, c.Workload.PID)
	}
	if c.Guardian != nil {
		fmt.Fprintf(w, "%s  guardian pid: %d\n", in, c.Guardian.PID)
	}
	leader := c.LeaderState
	if st, ok := exitText(c.ExitCode, c.Signal); ok {
		leader += " (" + st + ") at " + tstr(c.LeaderExitedAt)
	}
	fmt.Fprintf(w, "%s  leader:       %s\n", in, leader)
	tree := c.TreeState
	if c.TreeEvidence != "" {
		tree += " (" + c.TreeEvidence + ")"
	}
	if c.TreeExitedAt != nil {
		tree += " at " + tstr(c.TreeExitedAt)
	}
	fmt.Fprintf(w, "%s  tree:         %s\n", in, tree)
	if c.StopReason != "" {
		fmt.Fprintf(w, "%s  stop reason:  %s\n", in, c.StopReason)
	}
	oom := "unknown (not observed)"
	if c.OOM != nil {
		oom = fmt.Sprint(*c.OOM)
	}
	fmt.Fprintf(w, "%s  oom:          %s\n", in, oom)
	if c.Error != "" {
		fmt.Fprintf(w, "%s  error:        %s\n", in, c.Error)
	}
	for _, ce := range c.CleanupErrors {
		fmt.Fprintf(w, "%s  cleanup error: %s\n", in, ce)
	}
}
