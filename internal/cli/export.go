package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/doctor"
)

func newExportCmd(g *globals) *cobra.Command {
	var to, commit string
	var asJSON bool
	c := &cobra.Command{
		Use:   "export ENV TREE (--to DEST | --commit MSG [--to DEST])",
		Short: "Copy an environment's private tree out, labelled complete, live/inconsistent, partial or failed",
		Long: `export copies tree TREE of environment ENV to DEST (which must not exist).
It works while the environment runs (the copy is then labelled
live/inconsistent) and after it stopped (complete). Files that can't be
copied are listed and the copy is labelled partial. A progress bar is shown
on a terminal. For a worktree tree, --commit MSG first commits everything in
it on its branch (hostfork/ENV/TREE); without --to nothing is copied.`,
		Args: exactArgs(2, "an environment id and a tree name"),
		RunE: func(c *cobra.Command, args []string) error {
			if to == "" && commit == "" {
				return usageErr("export needs --to DEST (a path that does not exist yet), or --commit MSG for a worktree tree")
			}
			h, err := g.backend(c.Context())
			if err != nil {
				return err
			}
			defer h.Close()
			opts := hostfork.ExportOptions{Commit: commit}
			tty := !asJSON && !g.remote() && term.IsTerminal(int(os.Stderr.Fd()))
			if tty {
				opts.Progress = func(files, total int64) {
					if files%64 != 0 && files != total {
						return
					}
					bar := ""
					if total > 0 {
						n := int(30 * files / total)
						n = min(n, 30)
						bar = "[" + strings.Repeat("#", n) + strings.Repeat(" ", 30-n) + "] "
					}
					fmt.Fprintf(os.Stderr, "\r%s%d/%d files", bar, files, total)
				}
			}
			res, err := h.Export(c.Context(), args[0], args[1], to, opts)
			if tty {
				fmt.Fprintln(os.Stderr)
			}
			if res != nil {
				if asJSON {
					if perr := printJSON(g.out, res); perr != nil {
						return perr
					}
				} else if res.Label == hostfork.ExportCommitted {
					if res.Commit == "" {
						fmt.Fprintf(g.out, "nothing to commit in %s/%s (branch %s)\n", res.Env, res.Tree, res.Branch)
					} else {
						fmt.Fprintf(g.out, "committed %s/%s on branch %s: %s\n", res.Env, res.Tree, res.Branch, res.Commit)
					}
				} else {
					if res.Commit != "" {
						fmt.Fprintf(g.out, "committed %s/%s on branch %s: %s\n", res.Env, res.Tree, res.Branch, res.Commit)
					}
					fmt.Fprintf(g.out, "exported %s/%s to %s: %s (%d files, %s, %d reflinked)\n", res.Env, res.Tree, res.Dest, res.Label, res.Files, doctor.Human(res.Bytes), res.Cloned)
					for _, e := range res.Errors {
						fmt.Fprintf(g.out, "  error: %s\n", e)
					}
				}
			}
			if err == nil && res.Label == hostfork.ExportPartial {
				return withCode(ExitIncomplete, nil)
			}
			return err
		},
	}
	c.Flags().StringVar(&to, "to", "", "destination path (must not exist)")
	c.Flags().StringVar(&commit, "commit", "", "for a worktree tree: commit everything in it on its branch with this message")
	c.Flags().BoolVar(&asJSON, "json", false, "print the export record as JSON")
	return c
}
