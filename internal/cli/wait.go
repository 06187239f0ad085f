package cli

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
)

func newWaitCmd(g *globals) *cobra.Command {
	var (
		tree            bool
		pattern, stream string
		since           int64
		stalled, limit  time.Duration
		asJSON          bool
	)
	c := &cobra.Command{
		Use:   "wait [--tree] [--for REGEX [--stream S] [--since OFFSET]] [--stalled D] [--timeout D] ID",
		Short: "Wait for a command: its end, a line of its output, or a stall",
		Long: `wait waits for a command (an environment with one command is accepted), also
one another process started, and exits:

  (plain)      when its leader exits (--tree: when its whole tree is gone),
               with its status, as run does (124 when hostfork ended it);
  --for REGEX  when a line of its output (stdout or stderr, or --stream)
               matches the regular expression (Go RE2 syntax), printing
               STREAM:OFFSET:LINE (the byte offset of the match) and exiting
               0; --since OFFSET (with --stream) searches from there, e.g.
               after the previous match;
  --stalled D  when it has written no output for D, exiting 0.

With --for or --stalled, a command that ends first makes wait exit 113 with
a line saying so. --timeout D bounds any wait: past it wait exits 115 and the
command runs on. --json prints the outcome (reason, match, record).`,
		Args: exactArgs(1, "one command or environment id"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			o := hostfork.WaitOptions{Tree: tree, Stream: stream, Since: since, Stalled: stalled}
			if pattern != "" {
				re, err := regexp.Compile(pattern)
				if err != nil {
					return usageErr("--for %q is not a valid regular expression (Go RE2 syntax, e.g. 'listening on [0-9]+'): %v", pattern, err)
				}
				o.For = re
			}
			switch {
			case stream != "" && stream != "stdout" && stream != "stderr":
				return usageErr("--stream %q: use stdout or stderr", stream)
			case (stream != "" || since != 0) && o.For == nil:
				return usageErr("--stream and --since narrow --for: give --for REGEX")
			case since < 0 || (since > 0 && stream == ""):
				return usageErr("--since needs --stream (each stream has its own offsets) and must not be negative")
			case stalled < 0 || limit < 0:
				return usageErr("--stalled and --timeout take positive durations such as 5s")
			case tree && (o.For != nil || stalled > 0):
				return usageErr("--tree is for a plain wait: a wait for --for or --stalled already ends when the tree does")
			}
			ctx := c.Context()
			id, err := commandID(ctx, h, args[0])
			if err != nil {
				return err
			}
			out, err := h.WaitUntil(ctx, id, o, limit)
			if err != nil {
				if errors.Is(err, hostfork.ErrUnverified) && out.Command.ID != "" {
					fmt.Fprintf(g.err, "hostfork: %s\n", errText(err))
					return withCode(ExitFailed, nil)
				}
				return err
			}
			if asJSON {
				if err := printJSON(g.out, out); err != nil {
					return err
				}
			}
			switch out.Reason {
			case hostfork.OutcomeMatch:
				if !asJSON {
					fmt.Fprintf(g.out, "%s:%d:%s\n", out.Match.Stream, out.Match.Offset, out.Match.Line)
				}
				return nil
			case hostfork.OutcomeStalled:
				if !asJSON {
					fmt.Fprintf(g.out, "stalled: no output since %s (%s ago)\n", out.QuietSince.Format(time.RFC3339Nano), time.Since(*out.QuietSince).Round(time.Millisecond))
				}
				return nil
			case hostfork.OutcomeEnded:
				what := "stalled"
				if o.For != nil {
					what = fmt.Sprintf("printed a line matching %q", pattern)
				}
				status := "status unknown"
				if st, ok := hostfork.ExitStatus(out.Command); ok {
					status = fmt.Sprintf("exit status %d", st)
				}
				return withCode(ExitFinished, fmt.Errorf("command %s ended (%s, %s) before it %s", out.Command.ID, out.Command.State, status, what))
			}
			return commandExit(g, out.Command)
		}),
	}
	f := c.Flags()
	f.BoolVar(&tree, "tree", false, "wait for the whole tree instead of the leader")
	f.StringVar(&pattern, "for", "", "return when a line of the output matches this regular expression")
	f.StringVar(&stream, "stream", "", "with --for: search only stdout or stderr")
	f.Int64Var(&since, "since", 0, "with --for and --stream: search from this byte offset")
	f.DurationVar(&stalled, "stalled", 0, "return when the command has written no output for this long")
	f.DurationVar(&limit, "timeout", 0, "give up after this long (exit 115); the command runs on")
	f.BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	return c
}
