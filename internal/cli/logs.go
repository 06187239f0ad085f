package cli

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
)

func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	var stream string
	var offset int64
	var tail int
	c := &cobra.Command{
		Use:   "logs [-f] [--stream stdout|stderr] [--offset N | --tail N] ID",
		Short: "Print a command's output files (an environment with one command is accepted)",
		Long: `logs prints a command's stdout (to stdout) and stderr (to stderr), or only one
stream (--stream, printed to stdout) from a byte offset (--offset: output is
addressed by byte, so a reader resumes exactly where it stopped), or from the
last N lines of each (--tail). With -f it follows the output until the
command's tree has exited, then exits with the command's status, as run does
(124 when hostfork ended it).`,
		Args: exactArgs(1, "one command or environment id"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			if stream != "" && stream != "stdout" && stream != "stderr" {
				return usageErr("--stream %q: use stdout or stderr", stream)
			}
			if offset < 0 || (offset > 0 && stream == "") {
				return usageErr("--offset needs --stream (each stream has its own offsets) and must not be negative")
			}
			if tail < 0 || (tail > 0 && offset > 0) {
				return usageErr("--tail takes a number of lines and excludes --offset")
			}
			ctx := c.Context()
			id, err := commandID(ctx, h, args[0])
			if err != nil {
				return err
			}
			_, rec, err := h.Status(ctx, id)
			if err != nil {
				return err
			}
			if rec.StdoutPath == "" {
				return usageErr("command %s inherited its caller's output; hostfork kept no files", id)
			}
			type src struct {
				stream string
				w      io.Writer
			}
			var srcs []src
			if stream == "" || stream == "stdout" {
				srcs = append(srcs, src{"stdout", g.out})
			}
			if stream == "" || stream == "stderr" {
				w := g.err
				if stream == "stderr" {
					w = g.out
				}
				srcs = append(srcs, src{"stderr", w})
			}
			var wg sync.WaitGroup
			errs := make([]error, len(srcs))
			for i, s := range srcs {
				rd, err := h.Logs(ctx, id, hostfork.LogOptions{Stream: s.stream, Offset: offset, Follow: follow, Tail: tail})
				if err != nil {
					return err
				}
				wg.Add(1)
				go func(i int, rd io.ReadCloser, w io.Writer) {
					defer wg.Done()
					defer rd.Close()
					_, errs[i] = io.Copy(w, rd)
				}(i, rd, s.w)
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil && !errors.Is(err, context.Canceled) {
					return err
				}
			}
			if !follow || ctx.Err() != nil {
				return nil
			}
			// The tree has ended: exit with the command's status, as run.
			_, final, err := h.Status(ctx, id)
			if err != nil {
				return err
			}
			return commandExit(g, *final)
		}),
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output until the command's tree exits")
	c.Flags().StringVar(&stream, "stream", "", "only stdout or only stderr (printed to stdout)")
	c.Flags().Int64Var(&offset, "offset", 0, "start at this byte offset of the stream (with --stream)")
	c.Flags().IntVar(&tail, "tail", 0, "start at the last N lines of each stream")
	return c
}

// commandID resolves a command id (or prefix), or an environment's with
// exactly one command (what run --detach prints), to a command's id.
func commandID(ctx context.Context, h backend, arg string) (string, error) {
	kind, id, err := h.Resolve(ctx, arg)
	if err != nil {
		return "", err
	}
	if kind != "env" {
		return id, nil
	}
	env, _, err := h.Status(ctx, id)
	if err != nil {
		return "", err
	}
	if len(env.Commands) != 1 {
		ids := make([]string, len(env.Commands))
		for i, c := range env.Commands {
			ids[i] = c.ID
		}
		return "", usageErr("environment %s has %d commands; name one: %s", env.ID, len(env.Commands), strings.Join(ids, " "))
	}
	return env.Commands[0].ID, nil
}
