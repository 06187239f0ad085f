package main

import "github.com/spf13/cobra"

// newRootCmd builds the command tree. Each subcommand lives in its own file
// with its own constructor and is added here.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "hostfork-temporal",
		Short: "Run hostfork environments as Temporal activities",
		Long: "hostfork-temporal runs hostfork over Temporal (docs/temporal.md).\n\n" +
			"dev-server starts an embedded single-node Temporal server with SQLite\n" +
			"for one machine; worker serves one node's hostfork store; submit runs\n" +
			"a command through the RunInEnvironment workflow on whichever node\n" +
			"has room.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(
		newDevServerCmd(),
		newWorkerCmd(),
		newSubmitCmd(),
	)
	return root
}
