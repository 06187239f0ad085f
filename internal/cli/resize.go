package cli

import (
	"strconv"

	"github.com/spf13/cobra"
)

func newResizeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resize ID COLS ROWS",
		Short: "Set the size of a command's terminal (started with --tty)",
		Args:  exactArgs(3, "a command id, columns and rows"),
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			cols, err1 := strconv.ParseUint(args[1], 10, 16)
			rows, err2 := strconv.ParseUint(args[2], 10, 16)
			if err1 != nil || err2 != nil || cols == 0 || rows == 0 {
				return usageErr("resize %s %s: give columns and rows as numbers from 1 to 65535", args[1], args[2])
			}
			ctx := c.Context()
			cmd, err := openSessionCommand(ctx, h, args[0])
			if err != nil {
				return err
			}
			return cmd.Resize(ctx, uint16(cols), uint16(rows))
		}),
	}
}
