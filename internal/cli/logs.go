package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	var stream string
	c := &cobra.Command{
		Use:   "logs [-f] [--stream stdout|stderr] ID",
		Short: "Print a command's output files (an environment with one command is accepted)",
		Args:  exactArgs(1, "one command or environment id"),
		RunE: func(c *cobra.Command, args []string) error {
			if stream != "" && stream != "stdout" && stream != "stderr" {
				return usageErr("--stream %q: use stdout or stderr", stream)
			}
			h, err := g.open(c.Context())
			if err != nil {
				return err
			}
			defer h.Close()
			env, cmd, err := h.Status(c.Context(), args[0])
			if err != nil {
				return err
			}
			if env != nil {
				if len(env.Commands) != 1 {
					ids := make([]string, len(env.Commands))
					for i, c := range env.Commands {
						ids[i] = c.ID
					}
					return usageErr("environment %s has %d commands; name one: %s", env.ID, len(env.Commands), strings.Join(ids, " "))
				}
				cmd = env.Commands[0]
			}
			if cmd.StdoutPath == "" {
				return usageErr("command %s inherited its caller's output; hostfork kept no files", cmd.ID)
			}
			type src struct {
				path string
				w    io.Writer
			}
			var srcs []src
			if stream == "" || stream == "stdout" {
				srcs = append(srcs, src{cmd.StdoutPath, g.out})
			}
			if stream == "" || stream == "stderr" {
				w := g.err
				if stream == "stderr" {
					w = g.out
				}
				srcs = append(srcs, src{cmd.StderrPath, w})
			}
			offs := make([]int64, len(srcs))
			for {
				for i, s := range srcs {
					n, err := copyFrom(s.path, offs[i], s.w)
					offs[i] += n
					if err != nil {
						return err
					}
				}
				if !follow {
					return nil
				}
				cur, err := h.Command(c.Context(), cmd.ID)
				if err != nil {
					return err
				}
				if cur.TreeState == registry.Exited || hostfork.ProcessState(cur) == hostfork.StateExited {
					for i, s := range srcs {
						n, _ := copyFrom(s.path, offs[i], s.w)
						offs[i] += n
					}
					return nil
				}
				select {
				case <-c.Context().Done():
					return nil
				case <-time.After(100 * time.Millisecond):
				}
			}
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output until the command's tree exits")
	c.Flags().StringVar(&stream, "stream", "", "only stdout or only stderr (printed to stdout)")
	return c
}

func copyFrom(path string, off int64, w io.Writer) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, fmt.Errorf("output file %s is gone (retention may have removed it)", path)
		}
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	return io.Copy(w, f)
}
