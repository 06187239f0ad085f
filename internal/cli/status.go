package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
)

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status ID",
		Short: "Everything recorded about an environment or a command",
		Args:  exactArgs(1, "one environment or command id (a unique prefix is enough)"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			env, cmd, err := h.Status(c.Context(), args[0])
			if err != nil {
				return err
			}
			if env != nil && !g.showEnv {
				r := hostfork.RedactEnv(*env)
				env = &r
			}
			if asJSON {
				if env != nil {
					return printJSON(g.out, env)
				}
				return printJSON(g.out, cmd)
			}
			if env != nil {
				printEnv(g.out, env)
				return nil
			}
			// Explicit variables given at the environment's creation (run
			// --env) are in its record; a command's own (exec --env) are
			// not recorded at all.
			var known map[string]string
			if len(cmd.EnvKeys) > 0 {
				if e, _, err := h.Status(c.Context(), cmd.Env); err == nil && e != nil {
					known = specEnv(e)
				}
			}
			printCommandEnv(g.out, cmd, "", known, g.showEnv)
			return nil
		}),
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (the environment's or the command's record)")
	c.Flags().BoolVar(&g.showEnv, "show-env", false, "show the values of explicit environment variables (hidden by default: they may be secrets)")
	return c
}

func printEnv(w io.Writer, e *hostfork.EnvRecord) {
	fmt.Fprintf(w, "environment %s\n", e.ID)
	state := string(e.State)
	if e.Due != "" {
		state += " (due: " + clean(e.Due) + ")"
	}
	fmt.Fprintf(w, "  state:        %s\n", state)
	fmt.Fprintf(w, "  tier:         %s\n", e.Tier)
	field(w, "  purpose:      ", e.Purpose)
	field(w, "  labels:       ", labelText(e.Labels))
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
	if e.AutoStop {
		fmt.Fprintf(w, "  auto-stop:    yes (it stops when its command's tree has exited)\n")
	}
	if e.StopReason != "" {
		fmt.Fprintf(w, "  stop reason:  %s (requested %s, confirmed %s)\n", e.StopReason, tstr(e.StopRequestedAt), tstr(e.StoppedAt))
	}
	field(w, "  cgroup:       ", e.CgroupPath)
	fmt.Fprintf(w, "  run dir:      %s\n", clean(e.RunDir))
	for _, t := range e.Trees {
		fmt.Fprintf(w, "  tree:         %s (%s, %s) %s -> %s\n", clean(t.Name), t.Kind, t.State, clean(t.HostPath), clean(t.WorkloadPath))
	}
	field(w, "  error:        ", e.Error)
	for _, a := range e.Abandoned {
		fmt.Fprintf(w, "  abandoned:    %s\n", clean(a))
	}
	for _, ce := range e.CleanupErrors {
		fmt.Fprintf(w, "  cleanup error: %s\n", clean(ce))
	}
	known := specEnv(e)
	shown := len(known) > 0 && !slices.Contains(slices.Collect(maps.Values(known)), hostfork.Redacted)
	for i := range e.Commands {
		fmt.Fprintln(w)
		printCommandEnv(w, &e.Commands[i], "  ", known, shown)
	}
}

// field prints label and the cleaned value v, unless v is empty.
func field(w io.Writer, label, v string) {
	if v != "" {
		fmt.Fprintf(w, "%s%s\n", label, clean(v))
	}
}

// specEnv is the explicit environment of an environment's spec.
func specEnv(e *hostfork.EnvRecord) map[string]string {
	var s struct {
		Env map[string]string `json:"env"`
	}
	if len(e.Spec) == 0 || json.Unmarshal(e.Spec, &s) != nil {
		return nil
	}
	return s.Env
}

// envSetText names a command's explicit variables: with their values when
// shown and recorded, else saying where (or whether) they are.
func envSetText(keys []string, known map[string]string, show bool) string {
	parts := make([]string, 0, len(keys))
	hidden, unrecorded := false, false
	for _, k := range keys {
		v, ok := known[k]
		switch {
		case ok && show:
			parts = append(parts, clean(k+"="+v))
		case ok:
			parts = append(parts, clean(k))
			hidden = true
		default:
			parts = append(parts, clean(k))
			unrecorded = true
		}
	}
	out := strings.Join(parts, " ")
	switch {
	case hidden && unrecorded:
		out += " (values hidden, --show-env shows those recorded with the environment; a command's own are not recorded)"
	case hidden:
		out += " (values hidden: --show-env shows them)"
	case unrecorded:
		out += " (values not recorded)"
	}
	return out
}

func printCommandEnv(w io.Writer, c *hostfork.CommandRecord, in string, known map[string]string, show bool) {
	fmt.Fprintf(w, "%scommand %s (environment %s)\n", in, c.ID, c.Env)
	fmt.Fprintf(w, "%s  argv:         %s\n", in, cleanArgv(c.Argv, 0))
	fmt.Fprintf(w, "%s  state:        %s\n", in, c.Liveness)
	fmt.Fprintf(w, "%s  record:       %s\n", in, c.State)
	field(w, in+"  purpose:      ", c.Purpose)
	field(w, in+"  labels:       ", labelText(c.Labels))
	fmt.Fprintf(w, "%s  cwd:          %s\n", in, clean(c.Cwd))
	if len(c.EnvKeys) > 0 {
		fmt.Fprintf(w, "%s  env set:      %s\n", in, envSetText(c.EnvKeys, known, show))
	}
	if c.StdoutPath != "" {
		fmt.Fprintf(w, "%s  stdout:       %s\n", in, clean(c.StdoutPath))
		fmt.Fprintf(w, "%s  stderr:       %s\n", in, clean(c.StderrPath))
	} else {
		fmt.Fprintf(w, "%s  output:       inherited (no files)\n", in)
	}
	if c.PID != nil {
		fmt.Fprintf(w, "%s  leader pid:   %d\n", in, *c.PID)
	}
	if c.Guardian != nil {
		fmt.Fprintf(w, "%s  guardian pid: %d\n", in, c.Guardian.PID)
	}
	leader := string(c.LeaderState)
	if st, ok := exitText(c.ExitCode, c.Signal); ok {
		leader += " (" + st + ") at " + tstr(c.LeaderExitedAt)
	}
	fmt.Fprintf(w, "%s  leader:       %s\n", in, leader)
	tree := string(c.TreeState)
	if c.TreeEvidence != "" {
		tree += " (" + clean(c.TreeEvidence) + ")"
	}
	if c.TreeExitedAt != nil {
		tree += " at " + tstr(c.TreeExitedAt)
	}
	fmt.Fprintf(w, "%s  tree:         %s\n", in, tree)
	if c.StopReason != "" {
		by := ""
		if c.StoppedByHostfork {
			by = " (hostfork ended the leader)"
		}
		fmt.Fprintf(w, "%s  stop reason:  %s%s\n", in, c.StopReason, by)
	}
	if c.Timeout > 0 {
		fmt.Fprintf(w, "%s  timeout:      %s\n", in, c.Timeout)
	}
	oom := "unknown (not observed)"
	if c.OOM != nil {
		oom = fmt.Sprint(*c.OOM)
	}
	fmt.Fprintf(w, "%s  oom:          %s\n", in, oom)
	for _, s := range c.Survivors {
		fmt.Fprintf(w, "%s  survivor:     pid %d (start %d)\n", in, s.PID, s.StartTime)
	}
	field(w, in+"  limits:       ", c.LimitsNote)
	if c.OutputTruncated {
		fmt.Fprintf(w, "%s  output:       TRUNCATED (the store's filesystem was full)\n", in)
	}
	field(w, in+"  error:        ", c.Error)
	for _, ce := range c.CleanupErrors {
		fmt.Fprintf(w, "%s  cleanup error: %s\n", in, clean(ce))
	}
}
