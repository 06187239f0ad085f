package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newBaselineCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "baseline",
		Short: "Register prepared sources for private trees (host preparation)",
		Long: `A baseline is a prepared Btrfs subvolume (snapshots) or any directory (overlay
lower or copy source). Registering only records it; hostfork never changes
or deletes a baseline.`,
	}
	var asJSON bool
	add := &cobra.Command{
		Use:   "add NAME PATH",
		Short: "Register PATH as baseline NAME and say which tree kinds it offers",
		Args:  exactArgs(2, "a name and a path"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			b, err := h.AddBaseline(c.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g.out, b)
			}
			fmt.Fprintf(g.out, "baseline %s: %s %s on %s; offers %s\n", b.Name, b.Kind, b.Path, b.FSType, strings.Join(b.Offers, ", "))
			for _, n := range b.Notes {
				fmt.Fprintf(g.out, "  %s\n", n)
			}
			return nil
		}),
	}
	add.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var lsJSON bool
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List registered baselines",
		Args:    exactArgs(0, "no arguments"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			bs, err := h.Baselines(c.Context())
			if err != nil {
				return err
			}
			if lsJSON {
				if bs == nil {
					return printJSON(g.out, []any{})
				}
				return printJSON(g.out, bs)
			}
			tw := newTable(g.out)
			fmt.Fprintln(tw, "NAME\tKIND\tFS\tOFFERS\tPATH")
			for _, b := range bs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Name, b.Kind, b.FSType, strings.Join(b.Offers, ","), b.Path)
			}
			return tw.Flush()
		}),
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON")
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Unregister a baseline (its files are not touched)",
		Args:  exactArgs(1, "a baseline name"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			if err := h.RemoveBaseline(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(g.out, "unregistered baseline %s (files untouched)\n", args[0])
			return nil
		}),
	}
	c.AddCommand(add, ls, rm)
	return c
}
