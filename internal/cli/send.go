package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"
)

func newSendCmd(g *globals) *cobra.Command {
	var eof bool
	c := &cobra.Command{
		Use:   "send [--eof] ID [TEXT | -]",
		Short: "Write to a command's terminal or stdin pipe without attaching",
		Long: `send writes TEXT (as given: add a newline with $'...\n' to end a line), or
this process's stdin with "-", to the session of command ID (started with
--tty or --stdin pipe), and returns once its guardian has written it all.
--eof then closes the stdin pipe (on a terminal, it types ^D).`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 || (len(args) == 1 && !eof) {
				return usageErr("send needs a command id and TEXT, \"-\" for stdin, or --eof: hostfork send [--eof] ID [TEXT | -]")
			}
			return nil
		},
		RunE: g.withBackend(func(c *cobra.Command, args []string, h backend) error {
			ctx := c.Context()
			cmd, err := openSessionCommand(ctx, h, args[0])
			if err != nil {
				return err
			}
			if len(args) == 2 {
				data := []byte(args[1])
				if args[1] == "-" {
					if data, err = io.ReadAll(os.Stdin); err != nil {
						return err
					}
				}
				if err := cmd.Send(ctx, data); err != nil {
					return err
				}
			}
			if eof {
				return cmd.CloseStdin(ctx)
			}
			return nil
		}),
	}
	c.Flags().BoolVar(&eof, "eof", false, "then close the command's stdin pipe (^D on a terminal)")
	return c
}
