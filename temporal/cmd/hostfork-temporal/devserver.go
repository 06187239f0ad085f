package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/habemus-papadum/hostfork/temporal/devserver"
)

func newDevServerCmd() *cobra.Command {
	var (
		opts     devserver.Options
		logFile  string
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "dev-server",
		Short: "Start an embedded single-node Temporal server with SQLite",
		Long: "dev-server starts Temporal's frontend, history, matching and worker\n" +
			"services in this process on one SQLite database, registers the namespace,\n" +
			"prints \"listening on HOST:PORT\" once the frontend answers, and runs until\n" +
			"SIGINT or SIGTERM. Without --db the state is in memory and lost at exit;\n" +
			"with --db a restart on the same file resumes the workflows in it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			if logFile != "" {
				f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					return err
				}
				defer f.Close()
				opts.Logger = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level}))
			}
			if opts.DBFile != "" {
				abs, err := filepath.Abs(opts.DBFile)
				if err != nil {
					return err
				}
				opts.DBFile = abs
			}
			ctx := cmd.Context()
			srv, err := devserver.Start(ctx, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", srv.Address())
			<-ctx.Done()
			return srv.Stop()
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DBFile, "db", "", "SQLite database `file` (created if missing); empty keeps state in memory")
	f.IntVar(&opts.Port, "port", 0, "frontend gRPC `port`; 0 picks a free one")
	f.StringVar(&opts.Host, "ip", devserver.DefaultHost, "IP `address` to bind")
	f.StringVar(&opts.Namespace, "namespace", devserver.DefaultNamespace, "`namespace` to register")
	f.StringVar(&logFile, "log-file", "", "append the server's JSON logs to `file`; empty discards them")
	f.StringVar(&logLevel, "log-level", "warn", "log `level` for --log-file: debug, info, warn, error")
	return cmd
}
